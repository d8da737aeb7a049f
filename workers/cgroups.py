"""A cgroup v2 per step command, so that whatever the test started dies with the step — `setsid nohup` daemons
too, which leave the command's process group (and session) and so escape killpg.

Where this process may create cgroups (root, or a delegated subtree), each command runs in a child cgroup of the
worker's own: the command's shell moves itself there before it runs anything, and at the command's end
`cgroup.kill` ends every process left in it and the cgroup is removed. Where cgroup v2 is not mounted or not
writable, nothing is done (the process group is still killed).

A dead worker's cgroups are ended by its reaper (LocalExecutor, the Ray actor's reaper) with its process groups, or
by the next command started beside it where no reaper lived: what its processes started outside their groups first
(a container build's RUN step, which runc puts in a cgroup of its own), a wind-down for podman to remove its working
container, then `cgroup.kill`. One party at a time ends a cgroup, holding a lock on its folder: a second one, finding
the RUN step already killed, would skip the wind-down and kill podman mid-cleanup (several bisects on one host).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import signal
import time
from collections.abc import Collection, Iterator
from pathlib import Path

from bisector.vocab.processes import ProcessGroup
from bisector.workers.process_tree import WIND_DOWN_S, end_groups, leavers_of

EMPTY_WAIT_S = 5.0  # how long a killed cgroup may take to empty before it is left for the kernel to reap
CLAIM_WAIT_S = WIND_DOWN_S + EMPTY_WAIT_S + 10.0  # a reaper's wait for another party ending the same cgroup
_counter = itertools.count()


def _cgroup2_mount() -> Path | None:
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def _own_cgroup() -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    return next((line[3:] for line in lines if line.startswith("0::")), None)


def _own_cgroup_dir() -> Path | None:
    mount, own = _cgroup2_mount(), _own_cgroup()
    return None if mount is None or own is None else mount / own.lstrip("/")


class StepCgroup:
    """One command's cgroup; `procs` is the file its shell writes its pid to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.procs = path / "cgroup.procs"

    @classmethod
    def create(cls) -> StepCgroup | None:
        """A fresh child cgroup of this process's own, or None where that cannot be made."""
        parent = _own_cgroup_dir()
        if parent is None:
            return None
        path = parent / f"gpu-bisect-{os.getpid()}-{next(_counter)}"
        _sweep(parent)
        try:
            path.mkdir()
        except OSError:
            return None
        if not (path / "cgroup.kill").exists() or not os.access(path / "cgroup.procs", os.W_OK):
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def wrap(self, argv: list[str]) -> list[str]:
        """argv run from a shell that first joins this cgroup (quietly carrying on where it may not)."""
        return ["bash", "-c", 'echo $$ 2>/dev/null >"$0"; exec "$@"', str(self.procs), *argv]

    def pids(self) -> list[int]:
        """The processes in the cgroup now."""
        try:
            return [int(line) for line in self.procs.read_text().split()]
        except (OSError, ValueError):
            return []

    def wind_down(self) -> None:
        """SIGKILL what the cgroup's processes started outside their process groups and outside the cgroup and,
        where there was any, wait up to WIND_DOWN_S for the cgroup to empty by itself (a podman build whose RUN step
        was killed cleans up and exits); cgroup.kill ends the rest."""
        members = set(self.pids())
        outside = [pid for pid in leavers_of(members) if pid not in members]
        if not outside:
            return
        for pid in outside:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + WIND_DOWN_S
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)

    def end_orphaned(self) -> None:
        """End a dead worker's cgroup: the wind-down (wind_down), then cgroup.kill and its removal."""
        self.wind_down()
        self.kill_and_remove()

    def kill_and_remove(self) -> None:
        """SIGKILL every process in the cgroup (daemons that left the process group included), then remove it.
        Idempotent."""
        if not self.path.exists():
            return
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + EMPTY_WAIT_S
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # EBUSY while the killed processes exit
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.01)


def _sweep(parent: Path) -> None:
    """End the cgroups of workers that died without ending them (SIGKILLed with their coordinator): their tests
    would run on as orphans. A cgroup is its worker's while a process with the pid in its name lives."""
    try:
        owners = {entry: entry.name.split("-")[2] for entry in parent.glob("gpu-bisect-*-*")}
    except OSError:
        return
    living = {pid: _alive(pid) for pid in set(owners.values())}  # a worker has many: each is looked up once
    stale = [entry for entry, pid in owners.items() if not living[pid]]
    for entry in stale:
        with _claimed(entry, wait_s=0.0) as held:
            if held:  # else its worker's reaper, or another step's sweep, is ending it
                StepCgroup(entry).end_orphaned()


def end_dead_worker(worker_pid: int | None, groups: Collection[ProcessGroup], grace_s: float) -> None:
    """End the steps of a worker that died: its process groups that are still the ones recorded (end_groups)
    and the step cgroups it made under this process's cgroup, each held for the whole time, so that a sweep beside
    it waits instead of killing podman while it removes its working container."""
    parent = _own_cgroup_dir()
    try:
        paths = (
            sorted(parent.glob(f"gpu-bisect-{worker_pid}-*")) if parent is not None and worker_pid is not None else []
        )
    except OSError:
        paths = []
    with contextlib.ExitStack() as claims:
        for path in paths:
            claims.enter_context(_claimed(path, wait_s=CLAIM_WAIT_S))  # held or not: the groups are ended anyway
        end_groups(groups, grace_s)
        for path in paths:
            StepCgroup(path).end_orphaned()


@contextlib.contextmanager
def _claimed(path: Path, wait_s: float) -> Iterator[bool]:
    """Hold the lock (flock) on a cgroup's folder, waiting up to wait_s for another holder; whether it is held. The
    lock goes with its holder's death."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # removed meanwhile
        yield False
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    held = False
                    break
                time.sleep(0.05)
        yield held
    finally:
        os.close(fd)


def _alive(pid: str) -> bool:
    """Whether the process lives (a zombie no reaper took does not)."""
    if not pid.isdigit():
        return True  # not one of ours: leave it
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]
