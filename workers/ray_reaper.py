"""The reaper of an actor's test processes: each test command runs in its own process group, and Ray kills only
an actor's direct children when the actor dies, so a reaper process (double-forked: no child of the actor) holds
the groups the actor announced and kills them when the actor's pipe closes — on ray.kill, SIGKILL, OOM kill, the
death of the actor's owner or a clean exit alike.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from typing import IO

from workers.process import KILL_GRACE_S

# Runs as `python -c`; reads "+PGID" / "-PGID" lines until the actor's end of the pipe closes.
_REAPER_SOURCE = """
import os, signal, sys, time
if os.fork():
    os._exit(0)
os.setsid()
groups = set()
for line in sys.stdin:
    (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
def signal_all(sig):
    alive = False
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
            alive = True
        except OSError:
            pass
    return alive
signal_all(signal.SIGTERM)
deadline = time.monotonic() + float(sys.argv[1])
while signal_all(0) and time.monotonic() < deadline:
    time.sleep(0.05)
signal_all(signal.SIGKILL)
"""


class Reaper:
    """The actor's side of the reaper: announce each process group a step starts, forget it when the step ends."""

    def __init__(self) -> None:
        launcher = subprocess.Popen(
            [sys.executable, "-c", _REAPER_SOURCE, str(KILL_GRACE_S)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert launcher.stdin is not None
        self._pipe: IO[str] = launcher.stdin
        launcher.wait()  # the launcher exits at once; its forked child keeps the pipe's read end

    def started(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def ended(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def _send(self, line: str) -> None:
        with contextlib.suppress(OSError):
            self._pipe.write(line)
            self._pipe.flush()
