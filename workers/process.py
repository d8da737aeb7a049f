"""Running one shell command in its own process group, with a deadline and a way to stop it early.

The command's output comes through a pipe that the caller's thread reads in chunks (workers/output.py): into the
step's capped log, a capped in-memory window and, for a test judged by a metric regex, the metric's bounded scan
(vocab/metric_scan.py), so nothing a test prints makes the worker's memory or the log
grow without bound.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bisector.vocab.metric_scan import MetricScan
from bisector.workers import step_launcher
from bisector.workers.cgroups import StepCgroup
from bisector.workers.output import READ_CHUNK_BYTES, OutputWindow, StepLog
from bisector.workers.process_tree import kill_group_leavers

KILL_GRACE_S = 5.0
POLL_INTERVAL_S = 0.05  # how often a running step checks its deadline and cancel flag


@dataclass(frozen=True)
class ProcessOutcome:
    exit_code: int  # negative: killed by that signal
    elapsed_s: float
    timed_out: bool = False
    cancelled: bool = False
    output: OutputWindow = field(default_factory=OutputWindow)  # the last WINDOW_BYTES of what it printed
    log_error: OSError | None = None  # writing the log failed (ENOSPC): the command was stopped


class CancelSignal:
    """A cancel flag that run_shell can wait on: set() from another thread wakes a running step at once, rather
    than at its next POLL_INTERVAL_S look (a cancelled probe's slot is free for the next one milliseconds later)."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._lock = threading.Lock()
        self._set = False

    def set(self) -> None:
        with self._lock:
            if not self._set:
                self._set = True
                with contextlib.suppress(BlockingIOError):
                    os.write(self._write_fd, b"x")

    def set_from_signal_handler(self) -> None:
        """set() without the lock, for a signal handler (it may interrupt a set() or clear() of its own thread)."""
        self._set = True
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"x")

    def clear(self) -> None:
        with self._lock:
            if self._set:
                self._set = False
                with contextlib.suppress(BlockingIOError):
                    while os.read(self._read_fd, 64):
                        pass

    def is_set(self) -> bool:
        return self._set

    def fileno(self) -> int:
        """Readable while set."""
        return self._read_fd

    def close(self) -> None:
        os.close(self._read_fd)
        os.close(self._write_fd)


_CHUNKS_PER_LOOK = 16  # reads of READ_CHUNK_BYTES between two looks at the deadline and the cancel flag
_CHUNKS_AFTER_EXIT = 64  # more than a pipe holds: what the exited command left in it, not what a daemon adds


class _Reader:
    """The command's output pipe, read without blocking: every chunk to the log, the window and the metric scan."""

    def __init__(self, fd: int, log: StepLog, window: OutputWindow, metric_scan: MetricScan | None) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.open = True
        self._log, self._window, self._metric_scan = log, window, metric_scan

    def drain(self, max_chunks: int = _CHUNKS_PER_LOOK) -> None:
        """Read what is there now (at most max_chunks chunks); at end of file, mark the pipe closed."""
        for _ in range(max_chunks):
            try:
                chunk = os.read(self.fd, READ_CHUNK_BYTES)
            except BlockingIOError:
                return
            if not chunk:
                self.open = False
                return
            self._window.feed(chunk)
            self._log.write(chunk)
            if self._metric_scan is not None:
                self._metric_scan.feed(chunk)


class _Waiter:
    """One wait for whichever comes first: output, the child's exit (its pidfd, where Linux has one), cancel_fd
    turning readable, or a timeout. poll(2), not select(2): a worker in a busy process (a Ray actor) may hold fds
    past 1024."""

    def __init__(self, proc: subprocess.Popen[bytes], reader: _Reader, cancel_fd: int | None) -> None:
        self._poller = select.poll()
        self._reader = reader
        self._poller.register(reader.fd, select.POLLIN)
        self._cancel_fd = cancel_fd
        if cancel_fd is not None:
            self._poller.register(cancel_fd, select.POLLIN)
        try:
            self._pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._pidfd = None
        if self._pidfd is not None:
            self._poller.register(self._pidfd, select.POLLIN)
        self._watching_output = True

    def wait(self, timeout_s: float) -> None:
        if self._watching_output and not self._reader.open:  # at end of file the pipe is always readable
            self._poller.unregister(self._reader.fd)
            self._watching_output = False
        self._poller.poll(math.ceil(max(timeout_s, 0.0) * 1000))

    def ignore_cancel(self) -> None:
        """Stop waking on cancel_fd (it stays readable while set: the kill's grace must not spin)."""
        if self._cancel_fd is not None:
            self._poller.unregister(self._cancel_fd)
            self._cancel_fd = None

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)


def _start(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], StepCgroup | None, int]:
    """Start argv in a session of its own and, where cgroups can be made, in a fresh cgroup it joins first; its
    process, cgroup and the read end of its output pipe."""
    cgroup = StepCgroup.create()  # where cgroups can be made: daemons that leave the group die with the step too
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            cgroup.wrap(argv) if cgroup else argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except BaseException:
        os.close(read_fd)
        if cgroup:
            cgroup.kill_and_remove()
        raise
    finally:
        os.close(write_fd)
    return proc, cgroup, read_fd


def run_shell(
    command: str,
    cwd: Path,
    env: dict[str, str],
    log: IO[bytes] | StepLog,
    timeout_s: float,
    *,
    should_cancel: Callable[[], bool] = lambda: False,
    on_start: Callable[[int], None] = lambda pgid: None,
    cancel_fd: int | None = None,
    metric_scan: MetricScan | None = None,
) -> ProcessOutcome:
    """Run `bash -c command` in cwd, its output to log (a StepLog, or a file wrapped in one and finished here), to
    the outcome's window and to metric_scan (all of it, as it comes; the caller finishes it), killing its process
    group at the deadline (SIGTERM, KILL_GRACE_S, SIGKILL).

    should_cancel is asked every POLL_INTERVAL_S, and at once whenever cancel_fd (a CancelSignal's) turns
    readable. A log write that fails (a full disk) stops the command too; the outcome's log_error says why."""
    step_log = log if isinstance(log, StepLog) else StepLog(log)
    window = OutputWindow()
    started = time.monotonic()
    argv = ["bash", "-c", command]
    launched = step_launcher.launch(argv, cwd, env)  # already in a cgroup of its own: no move on the step's path
    cgroup: StepCgroup | None
    if launched is not None:
        proc, cgroup, read_fd = launched.proc, launched.cgroup, launched.output_fd
    else:
        proc, cgroup, read_fd = _start(argv, cwd, env)
    reader = _Reader(read_fd, step_log, window, metric_scan)
    waiter = _Waiter(proc, reader, cancel_fd)
    deadline = started + timeout_s
    timed_out = cancelled = False
    # Stopping: the signals still to send to the group, the next at signal_at. Processes the command started
    # outside its group (a container build's RUN step) are killed first, and the command gets KILL_GRACE_S to
    # wind down by itself (podman removes its working container) before the group's SIGTERM.
    signals: list[signal.Signals] = []
    signal_at: float | None = None
    try:
        on_start(proc.pid)
        while proc.poll() is None:
            reader.drain()
            now = time.monotonic()
            if signal_at is None:
                timed_out = now >= deadline
                cancelled = not timed_out and (should_cancel() or step_log.error is not None)
                if timed_out or cancelled:
                    waiter.ignore_cancel()
                    signals = [signal.SIGTERM, signal.SIGKILL]
                    signal_at = now + KILL_GRACE_S if kill_group_leavers(proc.pid) else now
            if signal_at is not None and now >= signal_at:
                sent = signals.pop(0)
                kill_group_leavers(proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sent)
                if sent is signal.SIGKILL:
                    proc.wait()
                    break
                signal_at = now + KILL_GRACE_S
            until = signal_at if signal_at is not None else deadline
            waiter.wait(min(POLL_INTERVAL_S, max(until - time.monotonic(), 0.0)))
        # The shell exited; anything it left running in its group would outlive the step (and hold the pipe).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if cgroup:
            cgroup.kill_and_remove()
        reader.drain(max_chunks=_CHUNKS_AFTER_EXIT)  # what is in the pipe; a daemon outside the group may keep it open
    finally:
        if proc.poll() is None:  # a failure here (the coordinator gone as the start is announced): no orphan
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        waiter.close()
        os.close(read_fd)
        if cgroup:
            cgroup.kill_and_remove()
        if launched is not None:
            step_launcher.finished()
    if step_log is not log:
        step_log.finish()
    log_error = step_log.error
    if log_error is not None:
        cancelled = False
    return ProcessOutcome(proc.returncode, time.monotonic() - started, timed_out, cancelled, window, log_error)
