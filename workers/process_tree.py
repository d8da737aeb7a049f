"""The processes a step's command started that left its process group, found through /proc's parent links.

Killing a command's process group (and its cgroup) misses the work a container runtime starts for it: `podman
build` runs each RUN step through `runc`, in a session, a process group and a cgroup of its own, so the RUN ran on
after its build was cancelled or timed out, and podman, killed before the RUN ended, left its working container's
storage behind. While the command lives those processes are still its descendants; killing them first lets the
command notice and wind down by itself (podman then removes its working container and exits).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

_PROC = Path("/proc")


def _parents_and_groups() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group id) of every process this one can read (Linux; empty elsewhere)."""
    table: dict[int, tuple[int, int]] = {}
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
            table[int(name)] = (int(fields[1]), int(fields[2]))
    return table


def group_leavers(root: int) -> list[int]:
    """The descendants of root (a process group leader) that are in another group, and their descendants."""
    table = _parents_and_groups()
    if root not in table:
        return []
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    group = table[root][1]
    leavers: list[int] = []
    pending = list(children.get(root, []))
    while pending:
        pid = pending.pop()
        if table[pid][1] != group:
            leavers.append(pid)
        pending.extend(children.get(pid, []))
    return leavers


def kill_group_leavers(root: int) -> bool:
    """SIGKILL root's descendants outside its process group; whether there were any."""
    leavers = group_leavers(root)
    for pid in leavers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return bool(leavers)
