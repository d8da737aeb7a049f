"""Step commands started by a launcher that joined the step's cgroup ahead of time.

Joining a cgroup (the write of a pid to `cgroup.procs`) waits for the kernel's cgroup migration lock: 10-30 ms
whenever the previous migration on the host is more than a few tens of ms old, i.e. at every real step. A worker
that calls `keep_one_ready` as it starts keeps a launcher ready: a `python -I -S` that joins a fresh step cgroup,
then blocks reading its request (directory, argv, environment; sized, as a child forked from the worker may hold the
pipe open too) on stdin and execs the command in place, keeping its pid, its session and its output pipe. The
command starts as `subprocess.Popen` would start it: the signals Python ignores (SIGPIPE, SIGXFSZ) back to their
defaults, stdin on /dev/null, and an exec that fails raised in the worker as Popen raises it (through a
close-on-exec pipe), not run as a command that exits 127. Each command started this way starts the next launcher,
from a thread, so that the command is supervised meanwhile. The step then starts with no migration on its path.

Processes that never call `keep_one_ready` (a coordinator's own commands, a one-step actor) start every command
the usual way. An unused launcher exits when its stdin closes (`discard_all`, or this process's death) and its
cgroup is ended like any step's (`kill_and_remove`, or the sweep of a dead worker's cgroups).
"""

from __future__ import annotations

import contextlib
import marshal
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bisector.workers.cgroups import StepCgroup

# Run with -I -S: no site, no user paths; it imports only the interpreter's built-in modules. argv: the cgroup's
# cgroup.procs, the fd of the pipe that reports a failed start.
_LAUNCHER = """\
import _signal, marshal, os, sys
report = int(sys.argv[2])
os.set_inheritable(report, False)
try:
    fd = os.open(sys.argv[1], os.O_WRONLY)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
except OSError:
    pass  # as a wrapped command does: run on outside the cgroup (its process group still dies with the step)
def read(size):
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            os._exit(0)  # discarded, or its worker died
        data += chunk
    return data
cwd, argv, env = marshal.loads(read(int.from_bytes(read(8), "little")))
for name in ("SIGPIPE", "SIGXFSZ"):
    if hasattr(_signal, name):
        _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.close(null)
try:
    os.chdir(cwd)
    os.execvpe(argv[0], argv, env)
except OSError as error:
    os.write(report, f"{error.errno}:{error.strerror}".encode())
os._exit(127)
"""


@dataclass
class Launched:
    """A command started through a launcher: its process (the launcher's pid is the command's), its cgroup and
    the read end of its output pipe (stdout and stderr)."""

    proc: subprocess.Popen[bytes]
    cgroup: StepCgroup
    output_fd: int


@dataclass
class _Ready:
    proc: subprocess.Popen[bytes]
    cgroup: StepCgroup
    output_fd: int
    report_fd: int  # read end of the pipe that reports a failed exec; end of file when the exec succeeded

    def discard(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # EOF: the launcher exits by itself
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:  # a child forked from this process holds its stdin open too
            self.proc.kill()
            self.proc.wait()
        self.cgroup.kill_and_remove()
        os.close(self.output_fd)
        os.close(self.report_fd)


class _Pool:
    """The ready launchers of one process (a forked child makes its own: the parent's are not its children)."""

    def __init__(self) -> None:
        self.ready: list[_Ready] = []
        self.running = 0
        self.wanted = False  # set by keep_one_ready, cleared by discard_all
        self.generation = 0  # discard_all's count: a launcher started before the last one is not kept
        self.lock = threading.Lock()


_pool = _Pool()  # this process's (replaced in a forked child)
_inherited: list[_Pool] = []


def _forget_in_child() -> None:
    """In a child forked from this process: a pool of its own, and no copy of the parent's launchers' pipes (a
    long-lived child holding a launcher's stdin would keep it from seeing end of file when the parent discards it).
    Its locks may have been held by another thread of the parent at the fork: none is taken here."""
    global _pool
    for launcher in _pool.ready:
        if launcher.proc.stdin is not None:
            with contextlib.suppress(OSError):
                launcher.proc.stdin.close()
        for fd in (launcher.output_fd, launcher.report_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
    _inherited.append(_pool)  # kept: the parent's Popen objects are not this process's to finalize
    _pool = _Pool()


os.register_at_fork(after_in_child=_forget_in_child)


def _start_launcher() -> _Ready | None:
    """A launcher joining a fresh step cgroup, or None where no cgroup can be made (or no process started)."""
    cgroup = StepCgroup.create()
    if cgroup is None:
        return None
    read_fd, write_fd = os.pipe()
    report_read, report_write = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(cgroup.procs), str(report_write)],
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=write_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(report_write,),
        )
    except OSError:
        os.close(read_fd)
        os.close(report_read)
        cgroup.kill_and_remove()
        return None
    finally:
        os.close(write_fd)
        os.close(report_write)
    return _Ready(proc, cgroup, read_fd, report_read)


def keep_one_ready() -> None:
    """Start a launcher now if none is ready for the next command, and one after each command started through
    one from now on (a worker calls it as it starts, so that its first step finds one too)."""
    pool = _pool
    with pool.lock:
        pool.wanted = True
        generation = pool.generation
    _replenish(pool, generation)


def _replenish(pool: _Pool, generation: int) -> None:
    """Start a launcher if fewer are ready than commands run, keeping it unless discard_all ran meanwhile."""
    with pool.lock:
        if len(pool.ready) >= max(pool.running, 1):
            return
    launcher = _start_launcher()
    if launcher is None:
        return
    with pool.lock:
        if pool.wanted and pool.generation == generation:
            pool.ready.append(launcher)
            return
    launcher.discard()  # the worker is stopping


def _replenish_in_background(pool: _Pool) -> None:
    """_replenish from a thread: the command just started is supervised meanwhile (a sweep may take seconds)."""
    threading.Thread(target=_replenish, args=(pool, pool.generation), name="step-launcher", daemon=True).start()


def launch(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Launched | None:
    """Start argv in cwd with exactly env, in a session and a step cgroup of its own, through a ready launcher, and
    start the next command's launcher. None where no launcher is ready (the caller starts the command itself): a
    process that never called keep_one_ready, a host without writable cgroups, a directory that does not exist
    (the caller's own start reports it), a launcher that died while it waited. Raises what Popen raises for an
    argv or env it cannot pass (ValueError) or a command it cannot start (OSError)."""
    request = _request(argv, cwd, env)  # Popen's ValueError before anything is taken
    pool = _pool
    with pool.lock:
        launcher = pool.ready.pop() if pool.ready and os.path.isdir(cwd) else None
        if launcher is not None:
            pool.running += 1
        elif pool.wanted and not pool.ready:  # the last one could not start: try again for the next command
            _replenish_in_background(pool)
    if launcher is None:
        return None
    started = False
    try:
        started = _send(launcher, request) and _exec_succeeded(launcher)
    finally:
        if not started:  # no longer waiting, or the exec failed (raised): the command is not running
            finished()
            launcher.discard()
        with pool.lock:
            _replenish_in_background(pool)
    if not started:
        return None
    os.close(launcher.report_fd)
    return Launched(launcher.proc, launcher.cgroup, launcher.output_fd)


def _request(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> bytes:
    """The launcher's request: what Popen would pass, as strings (bytes and path-like values decoded as Popen
    encodes them)."""
    args = [os.fsdecode(argument) for argument in argv]
    variables = {os.fsdecode(name): os.fsdecode(value) for name, value in env.items()}
    if any("\0" in text for text in (*args, *variables, *variables.values())):
        raise ValueError("embedded null byte")
    if any("=" in name for name in variables):
        raise ValueError("illegal environment variable name")
    payload = marshal.dumps((os.path.abspath(cwd), args, variables))
    return len(payload).to_bytes(8, "little") + payload


def _send(launcher: _Ready, request: bytes) -> bool:
    """Give a waiting launcher its command; False where it is no longer waiting."""
    if launcher.proc.poll() is not None or launcher.proc.stdin is None:
        return False
    try:
        launcher.proc.stdin.write(request)
        launcher.proc.stdin.close()
    except OSError:
        return False
    return True


def _exec_succeeded(launcher: _Ready) -> bool:
    """Wait for the launcher's exec (its report pipe closes on it): True, or the OSError Popen would raise where the
    directory or the command could not be used."""
    report = b""
    while chunk := os.read(launcher.report_fd, 4096):
        report += chunk
    if not report:
        return True
    launcher.proc.wait()
    number, _, message = report.decode(errors="replace").partition(":")
    raise OSError(int(number) if number.isdigit() else 0, message)


def finished() -> None:
    """A command started through `launch` has ended."""
    pool = _pool
    with pool.lock:
        pool.running = max(pool.running - 1, 0)


def discard_all() -> None:
    """End this process's ready launchers and remove their cgroups (a worker calls it as it stops)."""
    pool = _pool
    with pool.lock:
        ready, pool.ready, pool.wanted = pool.ready, [], False
        pool.generation += 1
    for launcher in ready:
        launcher.discard()
