"""Session folders of the local Ray clusters gpu-bisect starts (Ray keeps one per cluster under its temp root,
/tmp/ray by default, and never removes it).

A clean close removes its own folder (workers/ray_cluster.py `release`). A coordinator killed outright cannot, so
each folder is marked at creation with its owner (host, pid, process start), and the next local cluster gpu-bisect
starts removes the marked folders whose owner is gone and whose cluster no process of this host still runs.
Folders without the mark (a cluster someone else started) are never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from bisector.vocab.processes import OWNER_MARK, mark_owner, owner_is_gone

__all__ = ["OWNER_MARK", "mark_session", "remove_abandoned_sessions", "remove_session"]


def mark_session(session: Path) -> None:
    """Record this process as the owner of a local cluster's session folder it just started."""
    mark_owner(session)


def remove_session(session: Path) -> None:
    """Remove a stopped local cluster's session folder, and Ray's `session_latest` link if it names it."""
    shutil.rmtree(session, ignore_errors=True)
    latest = session.parent / "session_latest"
    with contextlib.suppress(OSError):
        if latest.is_symlink() and Path(os.readlink(latest)) == session:
            latest.unlink()


def remove_abandoned_sessions(root: Path) -> list[Path]:
    """Remove the session folders under root that a gpu-bisect process of this host started, whose process is
    gone and whose cluster runs no more; the folders removed."""
    running = _command_lines()
    removed = []
    for session in sorted(root.glob("session_*")):
        if session.is_symlink() or not owner_is_gone(session):
            continue
        if any(str(session) in command for command in running):
            continue  # a Ray process of it lives on: it may still write its logs there
        remove_session(session)
        removed.append(session)
    return removed


def _command_lines() -> list[str]:
    """The command line of every process of this host (Ray's name their session folder)."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return lines
