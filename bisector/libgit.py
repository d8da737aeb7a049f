"""Checkouts of a worker's worktree in-process, through libgit2 (pygit2), where that is faster than git.

A step's checkout sits on the critical path of every round. In a small repository `git checkout` costs mostly
its process (2-3 ms on an idle host, several times that when W workers start at once on a small one), and
libgit2 does the same forced checkout, index and detached HEAD included, in well under a millisecond. In a
larger one git is faster (it trusts its index's stat data; libgit2 rescans), so only repositories up to
MAX_TRACKED_FILES go in-process.

The in-process checkout is taken only when it is sure to give what `git checkout --detach --force` gives; the
caller runs git otherwise:

- the repository uses something libgit2 does not do at checkout (``cli_reason``): filter drivers (Git LFS's
  smudge), sparse checkout, hooks (a post-checkout hook, any core.hooksPath);
- the worktree's tracked files differ from its index or HEAD before the checkout: a step edited, deleted or
  replaced one (a symlink where a file was would have libgit2 write through it);
- the tracked files still differ after it (an attribute such as working-tree-encoding that libgit2 ignores).

Untracked files are not touched here: `git clean` removes them, with git's rules (ignored files stay, also
inside untracked directories, as build caches).
"""

from __future__ import annotations

from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy

LibGitError = pygit2.GitError
MAX_TRACKED_FILES = 1000  # measured: libgit2 wins below ~1000 files, git from a few thousand on


def cli_reason(worktree: Path, hooks_dir: Path) -> str | None:
    """Why this worktree must be checked out by git rather than libgit2, or None."""
    repo = pygit2.Repository(str(worktree))
    names = {entry.name.lower() for entry in repo.config}
    if any(name.startswith("filter.") and name.rsplit(".", 1)[-1] in ("smudge", "process") for name in names):
        return "filter drivers are configured (e.g. Git LFS)"
    if "core.sparsecheckout" in names and repo.config.get_bool("core.sparseCheckout"):
        return "sparse checkout"
    if "core.hookspath" in names:
        return "core.hooksPath is set (its hooks may run at checkout)"
    if (hooks_dir / "post-checkout").is_file():
        return "a post-checkout hook"
    return None


class InProcessWorktree:
    """One worktree driven through libgit2; open it once per worker and reuse it across steps."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._repo = pygit2.Repository(str(path))

    def checkout(self, sha: str) -> bool:
        """Check out sha (or any revision naming a commit) detached, resetting tracked files, if that is safe
        in-process. False: nothing was done, or the result is not what git gives; the caller runs git."""
        if len(self._repo.index) > MAX_TRACKED_FILES or self._tracked_changes():
            return False
        try:
            target = self._repo.revparse_single(sha).peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.InvalidSpecError):
            return False  # git reports a commit that is not there
        self._repo.checkout_tree(target.tree, strategy=CheckoutStrategy.FORCE)  # type: ignore[no-untyped-call]
        self._repo.set_head(target.id)
        return not self._tracked_changes()

    def _tracked_changes(self) -> bool:
        """Whether any tracked file differs from the index or the index from HEAD (untracked files aside)."""
        return bool(self._repo.status(untracked_files="no"))
