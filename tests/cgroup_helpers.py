"""Cgroup v2 for the tests of steps that outlive their workers: whether this process may make cgroups, and a cgroup
of a test's own to run a driver (a coordinator with its workers) and the next step in."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bisector.workers.cgroups import StepCgroup

Wrap = Callable[[list[str]], list[str]]  # an argv made into one that runs it somewhere


def own_cgroup_dir() -> Path | None:
    """This process's cgroup v2 directory, or None where cgroup v2 is not mounted."""
    mount = next((line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
                  if line.split()[2] == "cgroup2"), None)  # fmt: skip
    own = next(
        (line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")), None
    )
    return None if mount is None or own is None else Path(mount) / own.lstrip("/")


def cgroup_v2_writable() -> bool:
    """Whether this process may make a child cgroup v2 of its own (what the workers need)."""
    own = own_cgroup_dir()
    if own is None:
        return False
    probe = own / f"gpu-bisect-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    probe.rmdir()
    return True


@contextlib.contextmanager
def isolated_cgroup() -> Iterator[Path]:
    """A cgroup of this test's own, so that the sweep of a test running in parallel (a worker starting a step on
    the same host ends every dead worker's step cgroups under its own cgroup) cannot end this test's orphans
    before it looks at them. Its name is outside the sweep's pattern; whatever is left in it is killed at the end."""
    own = own_cgroup_dir()
    assert own is not None  # the test skips where cgroup v2 cannot be written
    path = own / f"bisect-test-orphans-{os.getpid()}"
    path.mkdir()
    try:
        yield path
    finally:
        for cgroup in [*(child for child in path.iterdir() if child.is_dir()), path]:  # children first: rmdir
            StepCgroup(cgroup).kill_and_remove()


def in_cgroup(cgroup: Path, argv: list[str]) -> list[str]:
    return ["bash", "-c", 'echo $$ >"$0" && exec "$@"', str(cgroup / "cgroup.procs"), *argv]


@pytest.fixture
def no_step_cgroups() -> Iterator[Wrap]:
    """What runs a command where steps get no cgroup of their own (so that no cgroup, nor the sweep of a dead
    worker's, ends a step's test): where this host lets processes make cgroups, a cgroup of the test's own that may
    have no child (the test skipped, with the reason, where that limit cannot be set); everything left in it is
    killed at the end. Where no cgroup can be made, steps get none anyway: the command runs as it is."""
    if not cgroup_v2_writable():
        yield lambda argv: argv
        return
    with isolated_cgroup() as cgroup:
        try:
            (cgroup / "cgroup.max.descendants").write_text("0")
        except OSError as exc:
            pytest.skip(f"a cgroup whose steps get none of their own cannot be made here: {exc}")
        yield lambda argv: in_cgroup(cgroup, argv)
