"""Per-user locations: the store and logs under the data dir, worktrees and images under the cache dir; what a
tree below them holds on disk."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
from pathlib import Path


def _env(name: str) -> str | None:
    """An environment variable, with an empty value treated as unset."""
    return os.environ.get(name) or None


def _user_dir(explicit_var: str, xdg_var: str, fallback: Path) -> Path:
    explicit = _env(explicit_var)
    if explicit:
        return Path(explicit).expanduser().absolute()
    xdg = _env(xdg_var)
    # The XDG spec says a relative XDG_*_HOME is invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "gpu-bisect"
    return fallback / "gpu-bisect"


def data_dir() -> Path:
    """$BISECT_DATA_DIR, else $XDG_DATA_HOME/gpu-bisect, else ~/.local/share/gpu-bisect."""
    return _user_dir("BISECT_DATA_DIR", "XDG_DATA_HOME", Path.home() / ".local" / "share")


def cache_dir() -> Path:
    """$BISECT_CACHE_DIR, else $XDG_CACHE_HOME/gpu-bisect, else ~/.cache/gpu-bisect."""
    return _user_dir("BISECT_CACHE_DIR", "XDG_CACHE_HOME", Path.home() / ".cache")


def logs_root() -> Path:
    """Every step log of every store that uses this data dir lies below it."""
    return data_dir() / "logs"


def log_dir(store_identity: str, bisect_id: int) -> Path:
    """One bisect's step logs. Bisect and step ids restart in every store, so two stores sharing the data dir
    (two `--db`s on one host) get folders of their own (store_identity: Store.identity)."""
    return store_log_dir(store_identity) / f"bisect-{bisect_id}"


def store_log_dir(store_identity: str) -> Path:
    """The step logs of every bisect of one store (store_identity: Store.identity)."""
    key = hashlib.sha256(store_identity.encode()).hexdigest()[:12]
    return logs_root() / f"store-{key}"


def worktree_root(repo: str | Path) -> Path:
    """Where this repository's reusable worktrees live (one per worker slot)."""
    resolved = Path(repo).resolve()
    key = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    return cache_dir() / "worktrees" / f"{resolved.name}-{key}"


def remove_tree(path: Path) -> None:
    """shutil.rmtree(path, ignore_errors=True), and what read-only directories below it hold (a package may install
    its folders with mode 0555: a user other than root cannot delete their entries): where the first pass leaves
    something, each directory is made writable and searchable by its owner, and the tree removed again."""
    shutil.rmtree(path, ignore_errors=True)
    if not path.is_dir() or path.is_symlink():
        return
    _make_owner_writable(path)
    for folder, subfolders, _ in os.walk(path):  # top-down: a folder is opened before os.walk lists it
        for name in subfolders:
            _make_owner_writable(Path(folder, name))
    shutil.rmtree(path, ignore_errors=True)


def _make_owner_writable(folder: Path) -> None:
    with contextlib.suppress(OSError):
        mode = os.lstat(folder).st_mode
        if stat.S_ISDIR(mode) and mode & 0o700 != 0o700:  # a link is never followed out of the tree
            os.chmod(folder, stat.S_IMODE(mode) | 0o700)


def tree_size(path: Path) -> int:
    """Bytes of the files below path. Links are never followed: one to a file counts as the link itself, one to a
    directory not at all; a file that vanishes meanwhile counts 0.
    What `bisect worktrees ls` shows of a worktree and an image's manifest stores as its size."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total
