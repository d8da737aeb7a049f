"""Which process a pid names: its start time tells a live process from a later one that reused the pid; and the
owner marks of folders a process makes that only its clean exit removes (so the next one can remove them once that
owner is gone)."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import NamedTuple

OWNER_MARK = "gpu-bisect-owner.json"


class ProcessGroup(NamedTuple):
    """A process group of this host, with its leader's start time read while the leader was the process that
    started it (before it was reaped), so that a later process reusing the pid is not taken for it."""

    pgid: int
    started: str


def process_start(pid: int) -> str | None:
    """The start time of a process in clock ticks since boot (/proc), None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None


def is_gone(host: str, pid: int, started: str | None) -> bool:
    """Whether the process (host, pid, its start time) was of this host and runs no more: its pid names no process
    now, or one started at another time (the pid reused). False for another host's, for one whose start time was not
    known, and where this process cannot see it (/proc hidden, hidepid=2; a pid that exists but is not ours):
    not ours to judge, and judging a live process gone would end its work."""
    if host != socket.gethostname() or not started or started == "?" or pid <= 0:
        return False
    now = process_start(pid)
    if now is not None:
        return now != started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: a process with that pid exists
        return False
    return False  # it exists, but /proc does not show it to us


def runs_here(host: str, pid: int, started: str | None) -> bool:
    """Whether the process (host, pid, its start time) is of this host and still runs: its pid names a process that
    started at that time, not a later one that reused the pid. False where that cannot be told."""
    if host != socket.gethostname() or not started or started == "?" or pid <= 0:
        return False
    return process_start(pid) == started


def has_exited(host: str, pid: int, started: str | None) -> bool:
    """Whether the process (host, pid, its start time) was of this host and its pid names no process now, not even a
    later one that reused it. False where that cannot be told (another host's, an unknown start time, a pid that
    exists but /proc does not show)."""
    return process_start(pid) is None and is_gone(host, pid, started)


def mark_owner(folder: Path) -> None:
    """Record this process (host, pid, start) as the owner of a folder it made."""
    pid = os.getpid()
    owner = {"host": socket.gethostname(), "pid": pid, "started": process_start(pid)}
    (folder / OWNER_MARK).write_text(json.dumps(owner))


def owner_is_gone(folder: Path) -> bool:
    """Whether folder's marked owner is a process of this host that is gone; False for a folder without the mark
    (not made by gpu-bisect, or unreadable: not ours to judge) and for one of another host."""
    try:
        owner = json.loads((folder / OWNER_MARK).read_text())
        host, pid, started = str(owner["host"]), int(owner["pid"]), owner["started"]
    except (OSError, ValueError, TypeError, KeyError):
        return False
    return is_gone(host, pid, started)


def ended_how(returncode: int) -> str:
    """subprocess's return code in words: a negative one is the signal that killed the process."""
    if returncode >= 0:
        return f"exited {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"
