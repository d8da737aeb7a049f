"""Step logs, served only from below the log folder: no `..`, no absolute paths, no symlinks out of it."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from bisector.vocab.errors import BisectError

MAX_LOG_BYTES = 4 * 1024 * 1024  # a longer log is served from its end


class LogAccessError(BisectError):
    """A log path that is refused (status 400 or 403) or missing (404)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def relative_log_path(log_dir: Path, stored: str) -> str | None:
    """A stored log path relative to the log folder, or None when it lies elsewhere (then it is not served)."""
    try:
        return Path(stored).resolve().relative_to(log_dir.resolve()).as_posix()
    except (ValueError, OSError):
        return None


def read_log(log_dir: Path, relative: str) -> str:
    """The text of the log at `relative` below log_dir (its last MAX_LOG_BYTES)."""
    path = PurePosixPath(relative)
    if not relative or "\x00" in relative or path.is_absolute() or ".." in path.parts:
        raise LogAccessError(f"log path {relative!r}: expected a path inside the log folder, without '..'", 400)
    root = log_dir.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise LogAccessError(f"log path {relative!r} leads outside the log folder", 403)
    if not target.is_file():
        raise LogAccessError(f"no log {relative!r}", 404)
    try:
        with target.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - MAX_LOG_BYTES))
            data = handle.read(MAX_LOG_BYTES)
    except OSError as exc:
        raise LogAccessError(f"log {relative!r} cannot be read: {exc.strerror}", 404) from None
    return data.decode("utf-8", "replace")
