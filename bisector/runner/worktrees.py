"""The worktrees gpu-bisect keeps per repository and worker slot (`<cache dir>/worktrees/<repo>-<hash>/slot-<n>`),
listed and pruned by `bisect worktrees ls|prune`.

A worker holds its slot's lock file (`slot-<n>.lock`, flock) for its life; a worktree whose lock can be taken is
idle. Prune removes idle worktrees while holding their locks, so that no worker starts in one being removed; the
lock files stay (removing one under a waiting worker would let two workers share a slot). A slot's submodules are
worktrees of the submodule cache's repositories (vocab/submodules.py): prune makes those forget the removed ones, then
removes those no worktree is left in and none used for a day.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bisector.vocab.errors import InputError, RepoError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.paths import cache_dir, tree_size, worktree_root
from bisector.vocab.submodules import prune_cache


@dataclass(frozen=True)
class WorktreeInfo:
    path: Path
    repo: Path | None  # the repository it belongs to; None when that repository is gone
    head: str  # the commit checked out ("" when unknown)
    in_use: bool  # a worker holds its lock
    size_bytes: int


@dataclass(frozen=True)
class Pruned:
    removed: list[WorktreeInfo]
    kept: list[WorktreeInfo]  # in use
    submodule_caches: dict[Path, int]  # the submodule cache repositories removed, with their sizes in bytes


def worktree_roots(repo: str | None = None) -> list[Path]:
    """The per-repository worktree directories: of repo, or of every repository. InputError for a repo path that
    does not exist and has no worktrees kept (a deleted repository's stay listed and prunable)."""
    if repo is not None:
        root = worktree_root(repo)
        if not Path(repo).exists() and not root.is_dir():
            raise InputError(f"--repo {repo}: no such folder, and no worktrees are kept for it")
        return [root]
    base = cache_dir() / "worktrees"
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def list_worktrees(repo: str | None = None) -> list[WorktreeInfo]:
    out = []
    for root in worktree_roots(repo):
        if not root.is_dir():
            continue
        for path in sorted((p for p in root.glob("slot-*") if p.is_dir()), key=_slot_number):
            with _slot_lock(path) as idle:
                out.append(WorktreeInfo(path, _owning_repo(path), _head(path), not idle, tree_size(path)))
    return out


def prune_worktrees(repo: str | None = None) -> Pruned:
    """Remove the idle worktrees (of repo, or of every repository), then the submodule cache's repositories that no
    worktree is left in and none used for a day."""
    removed, kept = [], []
    for info in list_worktrees(repo):
        with _slot_lock(info.path) as idle:
            if not idle:
                kept.append(info)
                continue
            repo_of_slot = _open(info.repo)
            if repo_of_slot is not None:
                repo_of_slot.remove_worktree(info.path)
            shutil.rmtree(info.path, ignore_errors=True)
            removed.append(info)
    for repo_path in {info.repo for info in removed}:
        repo_of_slots = _open(repo_path)
        if repo_of_slots is not None:
            with contextlib.suppress(RepoError):  # the registrations stay until a later prune; the files are gone
                repo_of_slots.prune_worktrees()
    return Pruned(removed, kept, prune_cache())


def _open(repo: Path | None) -> GitRepo | None:
    """The repository a slot belongs to, where it is still there to ask."""
    if repo is None:
        return None
    try:
        return GitRepo(repo)
    except RepoError:
        return None


@contextlib.contextmanager
def _slot_lock(path: Path) -> Iterator[bool]:
    """Hold the slot's lock while the caller looks at (or removes) it; yields whether it was free (idle)."""
    lock_path = path.parent / f"{path.name}.lock"
    if not lock_path.exists():
        yield True
        return
    with lock_path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def _slot_number(path: Path) -> int:
    suffix = path.name.removeprefix("slot-")
    return int(suffix) if suffix.isdigit() else -1


def _admin_dir(path: Path) -> Path | None:
    try:
        return Path((path / ".git").read_text().removeprefix("gitdir:").strip())
    except OSError:
        return None


def _owning_repo(path: Path) -> Path | None:
    """The working tree of the repository that registered this worktree (its .git file names its admin dir)."""
    admin = _admin_dir(path)
    if admin is None or not admin.is_dir():
        return None
    repo = admin.parent.parent.parent  # <repo>/.git/worktrees/<name>
    return repo if (repo / ".git").exists() else None


def _head(path: Path) -> str:
    admin = _admin_dir(path)
    try:
        return (admin / "HEAD").read_text().strip() if admin else ""
    except OSError:
        return ""
