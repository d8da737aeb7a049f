"""A fetch from a source that may be slow to answer, through an incoming repository: the source is read into a fresh
bare repository in the target's git directory (INCOMING) that borrows the target's objects (so the source is asked
only for what the target lacks), then the target takes what came in with a local fetch under its locks. A slow
source holds no lock of the target; the target's worktree adds wait only for the local fetch (a fetch's
connectivity check fails on a worktree being added)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from bisector.vocab.gitcommand import worktree_adds_held

INCOMING = "gpu-bisect-incoming"  # in the target's git directory; made fresh for each fetch, removed after


class GitRunner(Protocol):
    """Runs `git -C directory args...`, raising when git fails (run_git, StoppableGit.run)."""

    def __call__(self, directory: Path, *args: str) -> object: ...


def fetch_through_incoming(
    git: GitRunner,
    target: Path,
    source: str,
    options: Sequence[str],
    fetched: Sequence[str],
    taken: Sequence[str],
    held: contextlib.AbstractContextManager[object],
    remote: str | None = None,
) -> None:
    """Fetch refspecs `fetched` from source into target's incoming repository, then, under held and target's
    worktree-add lock, fetch refspecs `taken` from it into target (a repository with a work tree); both fetches with
    options. remote: the name source is fetched by (set as its URL in the incoming repository, so the remote's
    settings in the user's git config apply); None fetches source's URL as is. The incoming repository is removed
    before (a killed fetcher's: the caller runs one fetch into target at a time) and after."""
    git_dir = target / ".git"
    incoming = git_dir / INCOMING
    shutil.rmtree(incoming, ignore_errors=True)
    try:
        git(target, "init", "--quiet", "--bare", "--template=", str(incoming))
        (incoming / "objects" / "info" / "alternates").write_text(f"{(git_dir / 'objects').resolve()}\n")
        if remote is not None:
            git(incoming, "config", f"remote.{remote}.url", source)
        git(incoming, "fetch", *options, remote or source, *fetched)
        with held, worktree_adds_held(git_dir):
            git(target, "fetch", *options, str(incoming), *taken)
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
