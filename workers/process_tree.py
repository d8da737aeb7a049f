"""The processes a step's command started that left its process group, found through /proc's parent links, and the
ending of process groups that start such processes.

Killing a command's process group (and its cgroup) misses the work a container runtime starts for it: `podman
build` runs each RUN step through `runc`, in a session, a process group and a cgroup of its own, so the RUN ran on
after its build was cancelled or timed out, and podman, killed before the RUN ended, left its working container's
storage behind. While the command lives those processes are still its descendants; killing them first lets the
command notice and wind down by itself (podman then removes its working container and exits). Whoever ends a step's
groups does it in that order: the worker at a cancel or timeout (workers/process.py), and the reapers of a worker
that died (LocalExecutor, the Ray actor's reaper, the sweep of a dead worker's cgroup).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Collection, Iterable
from pathlib import Path

from bisector.vocab.processes import ProcessGroup, has_exited, runs_here

_PROC = Path("/proc")
WIND_DOWN_S = 30.0  # how long a command whose group leavers were killed gets to end by itself (podman removing
# its working container took over 5 s on a loaded 2-core host); the wait ends as soon as it has
_LOOK_S = 0.05  # how often a wait looks whether the groups ended


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group id, state) of every process this one can read (Linux; empty elsewhere)."""
    table: dict[int, tuple[int, int, str]] = {}
    try:
        entries = [entry.name for entry in _PROC.iterdir() if entry.name.isdigit()]
    except OSError:
        return table
    for name in entries:
        try:
            stat = (_PROC / name / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # the command name, in parentheses, may hold spaces
        if len(fields) > 2 and fields[1].isdigit() and fields[2].isdigit():
            table[int(name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def leavers_of(roots: Iterable[int]) -> list[int]:
    """The descendants of each root that are in another process group than the root, and their descendants."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    leavers: set[int] = set()
    for root in roots:
        if root not in table:
            continue
        group = table[root][1]
        pending = list(children.get(root, []))
        while pending:
            pid = pending.pop()
            if table[pid][1] != group:
                leavers.add(pid)
            pending.extend(children.get(pid, []))
    return sorted(leavers)


def kill_leavers(roots: Iterable[int]) -> bool:
    """SIGKILL the roots' descendants outside their process groups; whether there were any."""
    leavers = leavers_of(roots)
    for pid in leavers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return bool(leavers)


def kill_group_leavers(root: int) -> bool:
    """SIGKILL root's descendants outside its process group; whether there were any."""
    return kill_leavers([root])


def live_groups(pgids: Iterable[int]) -> set[int]:
    """Those of pgids that hold a process that is not a zombie (orphans' zombies wait for whoever reaps them)."""
    wanted = set(pgids)
    return {group for _, group, state in _processes().values() if group in wanted and state != "Z"}


def wait_groups(pgids: Collection[int], timeout_s: float) -> set[int]:
    """Wait up to timeout_s for the groups to end; those still alive."""
    deadline = time.monotonic() + timeout_s
    alive = live_groups(pgids)
    while alive and time.monotonic() < deadline:
        time.sleep(_LOOK_S)
        alive = live_groups(alive)
    return alive


def end_groups(groups: Collection[ProcessGroup], grace_s: float, wind_down_s: float = WIND_DOWN_S) -> None:
    """End process groups of this host whose leaders are not this process's children (a dead worker's steps), each
    only while it is the group recorded: led by the recorded leader (its start time), or with live members and no
    process at the leader's pid (the leader exited; Linux gives no new process a pid that is still a group's id, so
    these are the recorded group's members unless that group ended whole and a new one took its id and lost its
    leader too). A group whose pid names another process (its start time differs) is left alone. The descendants of
    the groups' members outside them (a container build's RUN step) are SIGKILLed first and, where there were any,
    the groups get wind_down_s to end by themselves (podman removes its working container); then SIGTERM, grace_s,
    SIGKILL."""
    host = socket.gethostname()
    live = live_groups(group.pgid for group in groups)
    pgids = {
        group.pgid
        for group in groups
        if runs_here(host, group.pgid, group.started) or (group.pgid in live and has_exited(host, *group))
    }
    if not pgids:
        return
    if kill_leavers(pid for pid, (_, pgid, _) in _processes().items() if pgid in pgids):  # a leaderless group's too
        pgids = wait_groups(pgids, wind_down_s)
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    for pgid in wait_groups(pgids, grace_s):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
