"""Step logs kept within a size and an age, per store: whole bisects' log folders go, oldest finished first.

A store's logs lie in one folder per bisect (vocab.paths.log_dir). Only the folders of bisects that ended (or that
the store no longer holds) are removed, never one written to in the last hour (a `bisect run-at --bisect` of an old
bisect writes there), and each removed folder keeps one small note saying when and why, which the log views show
in place of the log. Every bisect that ends applies the cap of $BISECT_LOGS_MAX_SIZE (default 10G; `none`: no
cap); `bisect step-logs prune` applies any size or age on demand.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bisector.db.queries import bisect_ends
from bisector.db.store import Store
from bisector.vocab.errors import BisectError
from bisector.vocab.images import parse_size
from bisector.vocab.paths import store_log_dir

MAX_SIZE_ENV = "BISECT_LOGS_MAX_SIZE"
DEFAULT_MAX_SIZE = "10G"
PRUNED_NOTE = "LOGS-REMOVED.txt"  # what stays of a removed folder
RECENT_S = 3600.0  # a folder written to more recently is kept whatever its bisect's state


@dataclass(frozen=True)
class LogFolder:
    """One bisect's step logs."""

    bisect_id: int
    path: Path
    size_bytes: int
    last_write: float  # the newest file's mtime (epoch seconds)
    ended: datetime | None  # when its bisect ended; None while it runs or is paused
    known: bool  # whether the store still holds the bisect
    pruned: bool  # only the removal note is left

    @property
    def removable(self) -> bool:
        return not self.pruned and (self.ended is not None or not self.known)


def configured_max_bytes() -> int | None:
    """$BISECT_LOGS_MAX_SIZE as bytes (default 10G); None for `none`. InputError for a value that is no size."""
    text = os.environ.get(MAX_SIZE_ENV) or DEFAULT_MAX_SIZE
    return None if text.strip().lower() == "none" else parse_size(text)


def log_folders(store: Store) -> list[LogFolder]:
    """This store's bisect log folders, oldest bisect first."""
    root = store_log_dir(store.identity)
    with store.reading() as conn:
        ends = bisect_ends(conn)
    folders = []
    for entry in sorted(root.glob("bisect-*"), key=_bisect_number):
        number = _bisect_number(entry)
        if number < 0 or not entry.is_dir():
            continue
        size, last_write, names = _walk(entry)
        ended, known = ends.get(number), number in ends
        folders.append(LogFolder(number, entry, size, last_write, ended, known, names == {PRUNED_NOTE}))
    return folders


def prune_logs(
    store: Store, *, max_bytes: int | None, older_than_s: float | None = None, now: Callable[[], float] = time.time
) -> list[LogFolder]:
    """Remove the log folders of ended bisects older than older_than_s, then the oldest ended ones until the
    store's logs take at most max_bytes. The folders removed."""
    folders = log_folders(store)
    total = sum(f.size_bytes for f in folders)
    at = now()
    candidates = sorted(
        (f for f in folders if f.removable and at - f.last_write > RECENT_S),
        key=lambda f: (f.ended or datetime.min.replace(tzinfo=UTC), f.bisect_id),
    )
    removed = []
    for folder in candidates:
        too_old = older_than_s is not None and at - folder.last_write > older_than_s
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            continue
        reason = "older than the age asked" if too_old else f"the store's logs were over {max_bytes} bytes"
        when = f"{datetime.fromtimestamp(at, UTC):%Y-%m-%d %H:%M} UTC"
        _empty(folder.path, f"The step logs of bisect {folder.bisect_id} ({folder.size_bytes} bytes) were removed "
               f"on {when}: {reason} (see `bisect step-logs`).\n")  # fmt: skip
        total -= folder.size_bytes
        removed.append(folder)
    return removed


def keep_logs_bounded(store: Store, note: Callable[[str], None]) -> None:
    """The cap every ended bisect applies. A failure is noted, never raised: the bisect's result is stored."""
    try:
        max_bytes = configured_max_bytes()
        removed = prune_logs(store, max_bytes=max_bytes)
    except (BisectError, OSError) as exc:
        note(f"log retention skipped: {exc}")
        return
    if removed:
        freed = sum(f.size_bytes for f in removed) / (1 << 20)
        note(f"removed the step logs of {len(removed)} ended bisect(s), {freed:.1f} MiB, to keep this store's "
             f"logs under {os.environ.get(MAX_SIZE_ENV) or DEFAULT_MAX_SIZE} ({MAX_SIZE_ENV})")  # fmt: skip


def pruned_note(log_path: Path) -> str | None:
    """The note left where a step's log was removed by the retention, if it was."""
    try:
        return (log_path.parent / PRUNED_NOTE).read_text().strip()
    except OSError:
        return None


def _empty(folder: Path, note: str) -> None:
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    (folder / PRUNED_NOTE).write_text(note)


def _walk(folder: Path) -> tuple[int, float, set[str]]:
    """The bytes of the files below folder, counted as vocab.paths.tree_size counts them (the image and worktree
    sizes), the newest mtime of the folder and its files, and the files' names: one walk for the three."""
    size, last_write, names = 0, folder.stat().st_mtime, set()
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                stat = os.lstat(os.path.join(parent, name))
            except OSError:
                continue  # removed meanwhile
            size += stat.st_size
            last_write = max(last_write, stat.st_mtime)
            names.add(name)
    return size, last_write, names


def _bisect_number(path: Path) -> int:
    suffix = path.name.removeprefix("bisect-")
    return int(suffix) if suffix.isdigit() else -1
