"""Worktree slots: each worker process (local or a Ray actor) holds one directory, locked for its life."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO


def claim_worktree(root: Path, preferred: int) -> tuple[Path, IO[str]]:
    """Lock a worktree directory for this process's lifetime so that two bisects never share one.

    The lock lasts as long as the returned file stays open.
    """
    root.mkdir(parents=True, exist_ok=True)
    index = preferred
    while True:
        lock_file = (root / f"slot-{index}.lock").open("a")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            index += 1
            continue
        return root / f"slot-{index}", lock_file
