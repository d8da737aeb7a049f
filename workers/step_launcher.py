"""Step commands started by a launcher that joined the step's cgroup ahead of time.

Joining a cgroup (the write of a pid to `cgroup.procs`) waits for the kernel's cgroup migration lock: 10-30 ms
whenever the previous migration on the host is more than a few tens of ms old, i.e. at every real step. A
launcher is started while the previous step runs (or when the worker starts): it joins a fresh step cgroup, then
blocks reading its request (directory, argv, environment; sized, as a child forked from the worker may hold
the pipe open too) on stdin and execs the command in place, keeping its pid,
its session and its output pipe. The step then starts with no migration on its path.

One launcher is kept ready for each command running in this process. An unused one exits when its stdin closes
(`discard_all`, or this process's death) and its cgroup is ended like any step's (`kill_and_remove`, or the sweep
of a dead worker's cgroups).
"""

from __future__ import annotations

import contextlib
import marshal
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from workers.cgroups import StepCgroup

# Run with -I -S: no site, no user paths; it imports nothing beyond the interpreter's built-in modules.
_LAUNCHER = """\
import marshal, os, sys
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
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
try:
    os.chdir(cwd)
    os.execvpe(argv[0], argv, env)
except OSError as error:
    os.write(2, f"gpu-bisect: cannot start {argv[0]} in {cwd}: {error}\\n".encode())
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

    def discard(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # EOF: the launcher exits by itself
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1.0)
        self.cgroup.kill_and_remove()
        os.close(self.output_fd)


class _Pool:
    """The ready launchers of one process (a forked child makes its own: the parent's are not its children)."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.ready: list[_Ready] = []
        self.running = 0
        self.lock = threading.Lock()


_pool = _Pool()
_pool_lock = threading.Lock()


def _this_process_pool() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool.owner != os.getpid():
            _pool = _Pool()
        return _pool


def _start_launcher() -> _Ready | None:
    """A launcher joining a fresh step cgroup, or None where no cgroup can be made (or no process started)."""
    cgroup = StepCgroup.create()
    if cgroup is None:
        return None
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(cgroup.procs)],
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=write_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError:
        os.close(read_fd)
        cgroup.kill_and_remove()
        return None
    finally:
        os.close(write_fd)
    return _Ready(proc, cgroup, read_fd)


def keep_one_ready() -> None:
    """Start a launcher now if none is ready for the next command (a worker calls it as it starts, so that its
    first step finds one too)."""
    pool = _this_process_pool()
    with pool.lock:
        if len(pool.ready) >= max(pool.running, 1):
            return
    launcher = _start_launcher()
    if launcher is not None:
        with pool.lock:
            pool.ready.append(launcher)


def launch(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> Launched | None:
    """Start argv in cwd with exactly env, in a session and a step cgroup of its own, through a ready launcher; then
    start the next command's launcher. None where no launcher is ready (the caller starts the command itself):
    the first command of a process, a host without writable cgroups, a directory that does not exist (the
    caller's own start reports it), a launcher that died while it waited."""
    pool = _this_process_pool()
    with pool.lock:
        launcher = pool.ready.pop() if pool.ready and os.path.isdir(cwd) else None
        pool.running += 1
    started = launcher is not None and _send(launcher, (str(cwd), list(argv), dict(env)))
    keep_one_ready()
    if launcher is None or not started:
        if launcher is not None:
            launcher.discard()
        return None
    return Launched(launcher.proc, launcher.cgroup, launcher.output_fd)


def _send(launcher: _Ready, request: tuple[str, list[str], dict[str, str]]) -> bool:
    """Give a waiting launcher its command; False where it is no longer waiting."""
    if launcher.proc.poll() is not None or launcher.proc.stdin is None:
        return False
    try:
        payload = marshal.dumps(request)
        launcher.proc.stdin.write(len(payload).to_bytes(8, "little") + payload)
        launcher.proc.stdin.close()
    except OSError:
        return False
    return True


def finished() -> None:
    """A command started through `launch` (or started by its caller after `launch` returned None) has ended."""
    pool = _this_process_pool()
    with pool.lock:
        pool.running = max(pool.running - 1, 0)


def discard_all() -> None:
    """End this process's ready launchers and remove their cgroups (a worker calls it as it stops)."""
    pool = _this_process_pool()
    with pool.lock:
        ready, pool.ready = pool.ready, []
    for launcher in ready:
        launcher.discard()
