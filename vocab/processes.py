"""Which process a pid names: its start time tells a live process from a later one that reused the pid."""

from __future__ import annotations

from pathlib import Path


def process_start(pid: int) -> str | None:
    """The start time of a process in clock ticks since boot (/proc), None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None
