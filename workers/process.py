"""Running one shell command in its own process group, with a deadline and a way to stop it early."""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

KILL_GRACE_S = 5.0
POLL_INTERVAL_S = 0.05  # how often a running step checks its deadline and cancel flag


@dataclass(frozen=True)
class ProcessOutcome:
    exit_code: int  # negative: killed by that signal
    elapsed_s: float
    timed_out: bool = False
    cancelled: bool = False


class CancelSignal:
    """A cancel flag that run_shell can wait on: set() from another thread wakes a running step at once, rather
    than at its next POLL_INTERVAL_S look (a cancelled probe's slot is free for the next one milliseconds later)."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        self._lock = threading.Lock()
        self._set = False

    def set(self) -> None:
        with self._lock:
            if not self._set:
                self._set = True
                os.write(self._write_fd, b"x")

    def clear(self) -> None:
        with self._lock:
            if self._set:
                self._set = False
                with contextlib.suppress(BlockingIOError):
                    os.read(self._read_fd, 64)

    def is_set(self) -> bool:
        return self._set

    def fileno(self) -> int:
        """Readable while set."""
        return self._read_fd

    def close(self) -> None:
        os.close(self._read_fd)
        os.close(self._write_fd)


def kill_group(pgid: int, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM a process group whose leader is not our child, then SIGKILL whatever is left after grace_s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(POLL_INTERVAL_S)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's group, give it KILL_GRACE_S to exit, then SIGKILL whatever is left of the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def _exit_waiter(proc: subprocess.Popen[bytes], cancel_fd: int | None) -> Iterator[Callable[[float], None]]:
    """A wait that returns as soon as the child exits (a pidfd where Linux has one) or cancel_fd turns readable,
    or after timeout_s. poll(2), not select(2): a worker in a busy process (a Ray actor) may hold fds past 1024."""
    poller = select.poll()
    if cancel_fd is not None:
        poller.register(cancel_fd, select.POLLIN)
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is None and cancel_fd is None:
        yield lambda timeout_s: time.sleep(timeout_s)
        return
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)

    def wait(timeout_s: float) -> None:
        poller.poll(math.ceil(timeout_s * 1000))

    try:
        yield wait
    finally:
        if pidfd is not None:
            os.close(pidfd)


def run_shell(
    command: str,
    cwd: Path,
    env: dict[str, str],
    log: IO[bytes],
    timeout_s: float,
    *,
    should_cancel: Callable[[], bool] = lambda: False,
    on_start: Callable[[int], None] = lambda pgid: None,
    cancel_fd: int | None = None,
) -> ProcessOutcome:
    """Run `bash -c command` in cwd, output to log, killing its process group at the deadline.

    should_cancel is asked every POLL_INTERVAL_S, and at once whenever cancel_fd (a CancelSignal's) turns
    readable."""
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    on_start(proc.pid)
    deadline = started + timeout_s
    timed_out = cancelled = False
    with _exit_waiter(proc, cancel_fd) as wait_for_exit:
        while proc.poll() is None:
            if time.monotonic() >= deadline:
                timed_out = True
            elif should_cancel():
                cancelled = True
            if timed_out or cancelled:
                _terminate(proc)
                break
            wait_for_exit(min(POLL_INTERVAL_S, max(deadline - time.monotonic(), 0.0)))
    if not (timed_out or cancelled):
        # The shell exited; anything it left running in its group would outlive the step.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return ProcessOutcome(proc.returncode, time.monotonic() - started, timed_out, cancelled)
