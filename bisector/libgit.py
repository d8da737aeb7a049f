"""Checkouts of a worker's worktree in-process, through libgit2 (pygit2), where that is faster than git.

A step's checkout sits on the critical path of every round. In a small repository `git checkout` costs mostly
its process (2-3 ms on an idle host, several times that when W workers start at once on a small one), and
libgit2 does the same forced checkout, index and detached HEAD included, in well under a millisecond. In a
larger one git is faster (it trusts its index's stat data; libgit2 rescans), so only repositories up to
MAX_TRACKED_FILES go in-process.

The in-process checkout is taken only when it is sure to give what `git checkout --detach --force` gives; the
caller runs git otherwise:

- the repository uses something libgit2 does not do at checkout (``InProcessWorktree.cli_reason``): filter
  drivers (Git LFS's smudge), sparse checkout, hooks (a post-checkout hook, any core.hooksPath);
- the worktree's tracked files differ from its index or HEAD before the checkout: a step edited, deleted or
  replaced one (a symlink where a file was would have libgit2 write through it);
- the tracked files still differ after it (an attribute such as working-tree-encoding that libgit2 ignores).

Untracked files are not touched here: `git clean` removes them, with git's rules (ignored files stay, also
inside untracked directories, as build caches). ``needs_clean`` tells, in-process, whether there is anything
for it to remove, so a step that left nothing costs no git process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy

LibGitError = pygit2.GitError
MAX_TRACKED_FILES = 1000  # measured: libgit2 wins below ~1000 files, git from a few thousand on


class InProcessWorktree:
    """One worktree driven through libgit2; open it once per worker and reuse it across steps."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._repo = pygit2.Repository(str(path))

    def cli_reason(self, hooks_dir: Path) -> str | None:
        """Why this worktree must be checked out by git rather than libgit2, or None."""
        config = self._repo.config
        names = {entry.name.lower() for entry in config}
        if any(name.startswith("filter.") and name.rsplit(".", 1)[-1] in ("smudge", "process") for name in names):
            return "filter drivers are configured (e.g. Git LFS)"
        if "core.sparsecheckout" in names and config.get_bool("core.sparseCheckout"):
            return "sparse checkout"
        if "core.hookspath" in names:
            return "core.hooksPath is set (its hooks may run at checkout)"
        if (hooks_dir / "post-checkout").is_file():
            return "a post-checkout hook"
        return None

    def checkout(self, sha: str) -> bool:
        """Check out sha (or any revision naming a commit) detached, resetting tracked files, if that is safe
        in-process. False: nothing was done, or the result is not what git gives; the caller runs git."""
        if len(self._index()) > MAX_TRACKED_FILES or self._tracked_changes():
            return False
        try:
            target = self._repo.revparse_single(sha).peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.InvalidSpecError):
            return False  # git reports a commit that is not there
        self._repo.checkout_tree(target.tree, strategy=CheckoutStrategy.FORCE)  # type: ignore[no-untyped-call]
        self._repo.set_head(target.id)
        return not self._tracked_changes()

    def _index(self) -> pygit2.Index:
        """The worktree's index as it is on disk now (git, not libgit2, may have written it last)."""
        index: pygit2.Index = self._repo.index
        index.read(False)  # reloads only if the file changed
        return index

    def _tracked_changes(self) -> bool:
        """Whether any tracked file differs from the index or the index from HEAD (untracked files aside)."""
        return bool(self._repo.status(untracked_files="no"))

    def needs_clean(self) -> bool:
        """Whether the worktree holds anything `git clean -ffd` would remove: an untracked, unignored file,
        symlink or directory (an empty one too, which libgit2's status does not list). True when unsure."""
        index = self._index()
        if len(index) > MAX_TRACKED_FILES:
            return True
        files = {entry.path for entry in index}
        dirs = {parent for path in files for parent in _parents(path)}
        return self._untracked_under("", files, dirs)

    def _untracked_under(self, directory: str, files: set[str], dirs: set[str]) -> bool:
        with os.scandir(self.path / directory if directory else self.path) as entries:
            for entry in entries:
                path = f"{directory}/{entry.name}" if directory else entry.name
                if path == ".git":
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                if path in files and not is_dir:
                    continue
                if is_dir and path in dirs:
                    if self._untracked_under(path, files, dirs):
                        return True
                    continue
                if not self._repo.path_is_ignored(path):
                    return True
        return False


def _parents(path: str) -> list[str]:
    """'a/b/c.txt' -> ['a', 'a/b']."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
