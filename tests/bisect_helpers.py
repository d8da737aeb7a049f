"""Helpers shared by the tests (imported by name: the tests directory is on sys.path)."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from synthetic import BUILD_CMD, RUN_CMD

from bisector.core.spec import BisectSpec
from bisector.workers.process_tree import live_groups


def synthetic_spec(repo: Path, good: str, bad: str, **overrides: object) -> BisectSpec:
    values: dict[str, object] = {
        "repo": str(repo),
        "good": good,
        "bad": bad,
        "run": RUN_CMD,
        "build": BUILD_CMD,
        "executor": "inprocess",
        "timeout_s": 60.0,
    }
    values.update(overrides)
    return BisectSpec.from_options(values)


ROOT = Path(__file__).resolve().parents[1]


def cli_env(db: Path | None = None, **variables: str) -> dict[str, str]:
    """The environment of a `python -m bisector` subprocess: this checkout first on the path, the store at db."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **variables}
    if db is not None:
        env["BISECT_DB"] = f"sqlite:///{db}"
    return env


def run_cli(
    *args: str, db: Path | None = None, timeout_s: float = 300, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """`bisect ARGS` as a user runs it, in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args],
        capture_output=True, text=True, env=kwargs.pop("env", cli_env(db)), timeout=timeout_s, **kwargs,
    )  # fmt: skip


def start_cli(
    *args: str, db: Path, wrap: Callable[[list[str]], list[str]] = list, **variables: str
) -> subprocess.Popen[str]:
    """A coordinator in its own process group (as a CI runner starts it), output captured; wrap makes its argv into
    one that runs it somewhere (cgroup_helpers.no_step_cgroups)."""
    return subprocess.Popen(
        wrap([sys.executable, "-m", "bisector", *args]), env=cli_env(db, **variables),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def wait_for(condition: Callable[[], bool], timeout_s: float = 180, what: str = "the condition") -> None:
    """Poll until condition() holds; the bound is only a safety net against a hang, never a speed target."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def wait_for_group_to_end(pgid: int, what: str) -> None:
    """Poll until process group pgid holds no live process (wait_for's bound only guards against a hang); what is
    left of it is SIGKILLed should the wait fail."""
    try:
        wait_for(lambda: not live_groups([pgid]), what=what)
    except AssertionError:
        os.killpg(pgid, signal.SIGKILL)
        raise


def stored_rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    """Rows of a query on a store a coordinator may be writing (an empty list while it is being created)."""
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
            return conn.execute(query).fetchall()
    except sqlite3.OperationalError:
        return []


def processes_with(text: str) -> list[int]:
    """Live processes (not zombies) whose command line, its arguments joined by spaces, holds text: a token of one
    test's own (a build's unique sleep, its RUN step's marker), so that other tests' processes never count."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if state != "Z":
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
