"""All git access of gpu-bisect goes through this module (GitPython).

Ref resolution, ancestry, the candidate range and worktrees live here so that the coordinator, the workers
and the analysis agree on one view of the repository.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import git

from vocab.domain import Commit, parse_pr_number
from vocab.errors import RepoError


def _one_line(exc: git.GitCommandError) -> str:
    stderr = str(exc.stderr or "").strip().replace("\n", " ")
    return stderr.removeprefix("stderr: ").strip("' ") or str(exc)


# mark (- for a boundary commit), SHA, parents, author, e-mail, commit time, subject; unit separators: a subject may
# hold any other character
_LOG_FORMAT = "%m%x1f%H%x1f%P%x1f%an%x1f%ae%x1f%ct%x1f%s"


def _in_worktree(path: Path) -> git.Git:
    """git run in the worktree and nowhere else, since checkout --force and clean destroy work. `-C path`: git
    enters the directory itself and fails when it is gone (GitPython runs git in this process's working directory
    when it cannot enter its own, and a worker's is the user's checkout). The ceiling: git does not take a
    repository above the worktree for its own when the worktree's .git is gone (a cache under a git checkout)."""
    runner = git.Git(str(path))
    runner.set_persistent_git_options(C=str(path))
    runner.update_environment(GIT_CEILING_DIRECTORIES=str(path.parent))
    return runner


class GitRepo:
    """A local git repository, opened read-mostly for bisecting."""

    def __init__(self, path: str | Path) -> None:
        try:
            self._repo = git.Repo(path, search_parent_directories=True)
        except (git.NoSuchPathError, git.InvalidGitRepositoryError):
            raise RepoError(f"not a git repository: {path}") from None
        if self._repo.bare:
            raise RepoError(f"bare repositories are not supported (no work tree): {path}")
        self.root = Path(self._repo.working_tree_dir or path).resolve()
        self._linked: set[Path] = set()  # worktrees found to be this repository's (checked once, not per step)

    def resolve(self, rev: str) -> str:
        """The full SHA of a commit named by a SHA prefix, branch, tag or other revision expression."""
        if not rev or rev.startswith("-"):
            raise RepoError(f"not a revision: {rev!r}")
        try:
            return str(self._repo.git.rev_parse("--verify", "--quiet", f"{rev}^{{commit}}"))
        except git.GitCommandError:
            raise RepoError(f"unknown revision {rev!r} in {self.root}") from None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        try:
            self._repo.git.merge_base("--is-ancestor", ancestor, descendant)
        except git.GitCommandError:
            return False
        return True

    def commit(self, sha: str, position: int = 0) -> Commit:
        c = self._repo.commit(sha)
        subject = str(c.message).strip().splitlines()[0] if str(c.message).strip() else ""
        return Commit(
            position=position,
            sha=c.hexsha,
            subject=subject,
            author=f"{c.author.name} <{c.author.email}>",
            date=datetime.fromtimestamp(c.committed_date, tz=UTC),
            pr=parse_pr_number(subject),
        )

    def parents(self, sha: str) -> list[str]:
        return [p.hexsha for p in self._repo.commit(sha).parents]

    def candidates(self, good: str, bad: str, paths: Sequence[str] = ()) -> list[Commit]:
        """The commits from good (position 0) to bad (the last position), oldest first, along bad's
        first-parent chain: each merge is one candidate, the usual view of a main branch. With paths, only the
        commits between that touch them (as `git bisect start -- PATH...`); the endpoints stay."""
        commits = [self.commit(good, 0), *(commit for commit, _ in self._first_parent_log(good, bad, paths=paths))]
        if paths and commits[-1].sha != bad:
            commits.append(self.commit(bad, len(commits)))
        return commits

    def range_for_bisect(self, good: str, bad: str, paths: Sequence[str] = ()) -> list[Commit]:
        """The first-parent chain from good to bad, validated: good an ancestor of bad on that chain. With paths,
        only the commits between that touch them are candidates."""
        if good == bad:
            raise RepoError(f"empty range: good and bad are the same commit {good[:12]}")
        if paths:
            if not self.is_ancestor(good, bad):
                raise RepoError(f"good {good[:12]} is not an ancestor of bad {bad[:12]}")
            oldest = str(self._repo.git.rev_list("--reverse", "--first-parent", bad, f"^{good}")).split()[0]
            self._check_first_parent(good, bad, self.parents(oldest)[:1])
            return self.candidates(good, bad, paths)
        # One git process: the chain with each commit's parents, and good itself as the boundary commit.
        listed = self._first_parent_log(good, bad, boundary=True)
        chain = [(commit, parents) for commit, parents in listed if parents is not None]
        boundary = {commit.sha: commit for commit, parents in listed if parents is None}
        if not chain or good not in boundary or chain[0][1][:1] != [good]:
            if not self.is_ancestor(good, bad):
                raise RepoError(f"good {good[:12]} is not an ancestor of bad {bad[:12]}")
            self._check_first_parent(good, bad, chain[0][1][:1] if chain else [])
        return [boundary[good], *(commit for commit, _ in chain)]

    @staticmethod
    def _check_first_parent(good: str, bad: str, oldest_first_parent: list[str]) -> None:
        if oldest_first_parent != [good]:
            example = f", e.g. {oldest_first_parent[0][:12]}" if oldest_first_parent else ""
            raise RepoError(
                f"good {good[:12]} is not on the first-parent chain of bad {bad[:12]} (it came in through a merge); "
                f"choose a good commit on the main line{example}"
            )

    def _first_parent_log(
        self, good: str, bad: str, *, boundary: bool = False, paths: Sequence[str] = ()
    ) -> list[tuple[Commit, list[str] | None]]:
        """`git log --first-parent` from bad down to good (excluded), oldest first, limited to commits touching paths
        when given: each commit with its parents; with boundary also the excluded commits next to the chain, with
        None for their parents. The chain's positions start at 1 (good's is 0); a boundary commit's position is 0."""
        options = ["--reverse", "--first-parent", f"--format={_LOG_FORMAT}", "-z"]
        if boundary:
            options.append("--boundary")
        listing = str(self._repo.git.log(*options, bad, f"^{good}", *(["--", *paths] if paths else [])))
        listed: list[tuple[Commit, list[str] | None]] = []
        position = 0
        for entry in (e for e in listing.split("\0") if e.strip()):
            mark, sha, parents, author, email, timestamp, subject = entry.strip("\n").split("\x1f", 6)
            position += mark != "-"
            commit = Commit(
                position=position if mark != "-" else 0,
                sha=sha,
                subject=subject,
                author=f"{author} <{email}>",
                date=datetime.fromtimestamp(int(timestamp), tz=UTC),
                pr=parse_pr_number(subject),
            )
            listed.append((commit, None if mark == "-" else parents.split()))
        return listed

    def merged_branch(self, merge: str) -> list[str]:
        """The commits a merge brought in along its second parent's first-parent chain, oldest first."""
        parents = self.parents(merge)
        if len(parents) < 2:
            return []
        return str(self._repo.git.rev_list("--reverse", "--first-parent", parents[1], f"^{parents[0]}")).split()

    def diff(self, base: str, head: str, *paths: str) -> str:
        return str(self._repo.git.diff(base, head, "--", *paths))

    def show_file(self, sha: str, path: str) -> str | None:
        try:
            return str(self._repo.git.show(f"{sha}:{path}"))
        except git.GitCommandError:
            return None

    def tree_hash(self, sha: str, path: str = "") -> str | None:
        """The hash of the tree (or blob) at path in sha, the commit's whole tree for "", None where absent."""
        try:
            return str(self._repo.git.rev_parse("--verify", "--quiet", f"{sha}:{path.rstrip('/')}"))
        except git.GitCommandError:
            return None

    def origin_url(self) -> str | None:
        """remote.origin.url, where the repository has one."""
        try:
            return str(self._repo.git.config("--get", "remote.origin.url")).strip() or None
        except git.GitCommandError:
            return None

    def export_tree(self, sha: str, destination: Path) -> None:
        """The commit's tree (no .git) into destination, which must not exist yet."""
        destination.mkdir(parents=True)
        try:
            with tempfile.TemporaryFile() as archive:
                self._repo.archive(archive, sha, format="tar")
                archive.seek(0)  # tar itself unpacks: it keeps the tree's symlinks and modes as git wrote them
                subprocess.run(["tar", "-x", "-C", str(destination)], stdin=archive, check=True, capture_output=True)
        except git.GitCommandError as exc:
            raise RepoError(f"exporting the tree of {sha[:12]} failed: {_one_line(exc)}") from None
        except subprocess.CalledProcessError as exc:
            raise RepoError(
                f"unpacking the tree of {sha[:12]} failed: {exc.stderr.decode(errors='replace').strip()}"
            ) from None

    # --- worktrees -------------------------------------------------------------------------------------

    def prune_worktrees(self) -> None:
        """Forget worktrees whose directories are gone (a cleared cache), so their paths can be reused."""
        try:
            self._repo.git.worktree("prune")
        except git.GitCommandError as exc:
            raise RepoError(f"git worktree prune in {self.root} failed: {_one_line(exc)}") from None

    def remove_worktree(self, path: Path) -> None:
        """Forget the worktree at path and remove its directory (what a step left in it goes too)."""
        with contextlib.suppress(git.GitCommandError):  # not registered (any more): removing the files is enough
            self._repo.git.worktree("remove", "--force", str(path))
        shutil.rmtree(path, ignore_errors=True)

    def ensure_worktree(self, path: Path, sha: str, *, clean: bool = True) -> None:
        """Check out sha in a detached worktree at path, creating it on first use and reusing it after.

        A slot found broken (its `.git` gone or not this repository's, the directory removed, git's record of it
        gone: a step may do any of that) is healed first: removed, `git worktree prune`d and added again. A
        checkout that fails in a slot that turns out broken is healed and tried once more; RepoError only when
        that fails too, or the slot is sound and the checkout still fails (an unknown commit).

        ``clean=False`` skips removing untracked files, for a caller that cleaned the worktree already
        (``clean_worktree`` right after its last step, off the next step's critical path).
        """
        if not self._sound(path):
            self._make_worktree(path, sha)
        try:
            self._check_out(path, sha)
        except RepoError:
            if self._links_here(path):
                raise
            self._make_worktree(path, sha)
            self._check_out(path, sha)
        if clean:
            self.clean_worktree(path)

    def _sound(self, path: Path) -> bool:
        """Whether path holds a worktree of this repository (checked in full once per path, then by its .git)."""
        if not (path / ".git").is_file():
            return False
        if path not in self._linked and not self._links_here(path):
            return False
        self._linked.add(path)
        return True

    def _make_worktree(self, path: Path, sha: str) -> None:
        """Register a fresh worktree at path (--no-checkout), removing whatever is there first."""
        self._linked.discard(path)
        broken = path.exists() or path.is_symlink()
        try:
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif broken:
                shutil.rmtree(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            # Workers of one repo add their worktrees at the same moment; git's own locks would fail one. Only the
            # registration runs under the lock (--no-checkout); the workers fill their trees in parallel.
            with (path.parent / ".worktree-add.lock").open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if broken:  # forget the broken slot's registration (git keeps adds in progress: "initializing")
                    self._repo.git.worktree("prune")
                self._repo.git.worktree("add", "--detach", "--force", "--no-checkout", str(path), sha)
        except git.GitCommandError as exc:
            raise RepoError(f"making the worktree {path} at {sha[:12]} failed: {_one_line(exc)}") from None
        except OSError as exc:
            raise RepoError(f"making the worktree {path} failed: {exc}") from None
        self._linked.add(path)

    def _check_out(self, path: Path, sha: str) -> None:
        try:
            _in_worktree(path).checkout("--detach", "--force", "--quiet", sha)  # --force resets tracked files
        except git.GitCommandError as exc:
            raise RepoError(f"checkout of {sha[:12]} in {path} failed: {_one_line(exc)}") from None
        except OSError as exc:  # the directory vanished under the slot
            raise RepoError(f"checkout of {sha[:12]} in {path} failed: {exc}") from None

    def _links_here(self, path: Path) -> bool:
        """Whether the worktree at path is one of this repository's: its .git file names an admin directory
        of this repository that names it back."""
        try:
            admin = Path((path / ".git").read_text().removeprefix("gitdir:").strip())
            back = Path((admin / "gitdir").read_text().strip())
        except OSError:
            return False
        mine = Path(self._repo.common_dir).resolve()
        return admin.resolve().parent.parent == mine and back.resolve() == (path / ".git").resolve()

    def clean_worktree(self, path: Path) -> None:
        """Remove the untracked files a step left in a worktree (ignored ones stay, as build caches)."""
        try:
            _in_worktree(path).clean("-ffd", "--quiet")
        except git.GitCommandError as exc:
            raise RepoError(f"cleaning {path} failed: {_one_line(exc)}") from None
