"""The reaper of an actor's test processes: each test command runs in its own process group, and Ray kills only
an actor's direct children when the actor dies, so a reaper process (double-forked: no child of the actor) holds
the groups the actor announced and ends them when the actor's pipe closes — on ray.kill, SIGKILL, OOM kill, the
death of the actor's owner or a clean exit alike. It ends them (each only while it is the group announced: led
by the process announced, its start time, or leaderless with live members), and the actor's step cgroups, as
LocalExecutor ends a dead worker's (workers/cgroups.py's end_dead_worker): what left the groups first (a container
build's RUN step, so that podman removes its working container), then SIGTERM, a grace, SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from bisector.vocab.processes import process_start
from bisector.workers.process import KILL_GRACE_S

# Runs as `python -c SOURCE GRACE_S PACKAGE_ROOT ACTOR_PID`; reads "+PGID START" / "-PGID" lines until the actor's
# end of the pipe closes. It imports only vocab.processes, workers.cgroups and workers.process_tree (the standard
# library's) from PACKAGE_ROOT.
_REAPER_SOURCE = """
import os, sys
if os.fork():
    os._exit(0)
os.setsid()
groups = {}
for line in sys.stdin:
    pgid, _, started = line[1:].strip().partition(" ")
    if line[0] == "+":
        groups[int(pgid)] = started
    else:
        groups.pop(int(pgid), None)
sys.path.insert(0, sys.argv[2])
from bisector.vocab.processes import ProcessGroup
from bisector.workers.cgroups import end_dead_worker
end_dead_worker(int(sys.argv[3]), [ProcessGroup(*group) for group in groups.items()], float(sys.argv[1]))
"""
_PACKAGE_ROOT = str(Path(__file__).parents[2])  # the folder that holds the bisector package


class Reaper:
    """The actor's side of the reaper: announce each process group a step starts, forget it when the step ends."""

    def __init__(self) -> None:
        launcher = subprocess.Popen(
            [sys.executable, "-c", _REAPER_SOURCE, str(KILL_GRACE_S), _PACKAGE_ROOT, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert launcher.stdin is not None
        self._pipe: IO[str] = launcher.stdin
        self._lock = threading.Lock()  # a slot's step and its builds ahead announce groups from two threads
        launcher.wait()  # the launcher exits at once; its forked child keeps the pipe's read end

    def started(self, pgid: int) -> None:
        """Announce a group with its leader's start time, read now (a command's group is announced before its leader
        can be reaped); one whose leader is already gone could not be told from a later process reusing its pid."""
        if (started := process_start(pgid)) is not None:
            self._send(f"+{pgid} {started}\n")

    def ended(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def _send(self, line: str) -> None:
        with self._lock, contextlib.suppress(OSError):
            self._pipe.write(line)
            self._pipe.flush()
