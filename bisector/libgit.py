"""Checkouts of a worker's worktree in-process, through libgit2 (pygit2): no git process per step.

A step's checkout sits on the critical path of every round, and `git checkout` plus `git clean` cost two
processes (about 4 ms together on an idle host, several times that when W workers start at once on a small
one). libgit2 does the same in about half a millisecond: a forced checkout that also removes untracked files
and directories (ignored ones stay, as build caches), the index and the detached HEAD updated.

libgit2 lacks a few things git does at checkout. A repository that uses them is checked out by git itself
(``cli_reason``): filter drivers (Git LFS's smudge), sparse checkout, a post-checkout hook. Untracked entries
libgit2 will not remove (a nested repository) are left for ``git clean``.
"""

from __future__ import annotations

from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy, FileStatus

LibGitError = pygit2.GitError


def cli_reason(worktree: Path, hooks_dir: Path) -> str | None:
    """Why this worktree must be checked out by git rather than libgit2, or None."""
    config = pygit2.Repository(str(worktree)).config
    names = {entry.name.lower() for entry in config}
    if any(name.startswith("filter.") and name.rsplit(".", 1)[-1] in ("smudge", "process") for name in names):
        return "filter drivers are configured (e.g. Git LFS)"
    if "core.sparsecheckout" in names and config.get_bool("core.sparseCheckout"):
        return "sparse checkout"
    hooks = Path(str(config["core.hooksPath"])) if "core.hookspath" in names else hooks_dir
    if (hooks / "post-checkout").is_file():
        return "a post-checkout hook"
    return None


class InProcessWorktree:
    """One worktree driven through libgit2; open it once per worker and reuse it across steps."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._repo = pygit2.Repository(str(path))

    def checkout(self, sha: str, *, clean: bool) -> bool:
        """Check out sha (or any revision naming a commit) detached, resetting tracked files; with clean, also
        remove untracked files and directories. Returns False when untracked entries remain that libgit2 does
        not remove: run git clean."""
        try:
            target = self._repo.revparse_single(sha).peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.InvalidSpecError):
            raise LibGitError(f"no commit {sha}") from None
        strategy = CheckoutStrategy.FORCE  # (CheckoutStrategy.NONE is libgit2's dry run, not an empty set)
        if clean:
            strategy |= CheckoutStrategy.REMOVE_UNTRACKED
        self._repo.checkout_tree(target.tree, strategy=strategy)  # type: ignore[no-untyped-call]
        self._repo.set_head(target.id)
        return not clean or not self.untracked()

    def clean(self) -> bool:
        """Remove untracked files and directories (a checkout of HEAD that removes them); False as above."""
        return self.checkout(str(self._repo.head.target), clean=True)

    def untracked(self) -> list[str]:
        statuses = self._repo.status(untracked_files="normal", ignored=False)
        return sorted(path for path, flags in statuses.items() if flags & FileStatus.WT_NEW)
