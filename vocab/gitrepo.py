"""The git access of gpu-bisect's coordinator and workers (git run as a subprocess: gitcommand.py; the submodules of
the trees it checks out and exports: submodules.py).

Ref resolution, ancestry, the candidate range and worktrees live here so that the coordinator, the workers
and the analysis agree on one view of the repository.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bisector.vocab.commit_range import CommitRange
from bisector.vocab.domain import Commit, parse_pr_number
from bisector.vocab.errors import RepoError
from bisector.vocab.gitcommand import GIT_LOCALE, GitCommandError, run_git, worktree_adds_held
from bisector.vocab.submodules import GITLINK_MODE, GITMODULES, LocalCopies, Submodule, cached_repository, listed

# the commits cherry_picked_tree makes: one fixed identity and date, so the same merge makes the same objects
_MADE_COMMITS = {
    f"GIT_{role}_{part}": value
    for role in ("AUTHOR", "COMMITTER")
    for part, value in (("NAME", "gpu-bisect"), ("EMAIL", "gpu-bisect@localhost"), ("DATE", "1700000000 +0000"))
}


@dataclass(frozen=True)
class PathChange:
    """One entry a commit changed against its first parent, a directory (tree) or a file."""

    path: str
    status: str  # git's letter: A added, D deleted, M modified, T type changed
    old: str  # the entry's object id before ("0" * 40: absent)
    new: str  # and after
    tree: bool


# mark (- for a boundary commit), SHA, parents, author, e-mail, author time (the date `git log` shows), subject; unit
# separators: a subject may hold any other character
_LOG_FORMAT = "%m%x1f%H%x1f%P%x1f%an%x1f%ae%x1f%at%x1f%s"
# one commit: SHA, author, e-mail, author time, then the whole message
_COMMIT_FORMAT = "%H%x1f%an%x1f%ae%x1f%at%x1f%B"


def _parsed(entry: str, position: int) -> tuple[Commit, list[str]]:
    """One entry of `git log --format=_LOG_FORMAT -z`: the commit (at position) and its parents."""
    _, sha, parents, author, email, timestamp, subject = entry.strip("\n").split("\x1f", 6)
    commit = Commit(
        position=position,
        sha=sha,
        subject=subject,
        author=f"{author} <{email}>",
        date=datetime.fromtimestamp(int(timestamp), tz=UTC),
        pr=parse_pr_number(subject),
    )
    return commit, parents.split()


class StoppableGit:
    """git commands of several threads (the service's mirrors), each in a process group of its own, so that stop()
    ends each with whatever it started (the remote's upload-pack, ssh, a credential helper)."""

    def __init__(self, timeout_s: float, stop_grace_s: float) -> None:
        """timeout_s: a command running longer is ended; stop_grace_s: how long a command ended (past its timeout,
        by stop() or by a stop signal in its thread) may take on SIGTERM before its group gets SIGKILL."""
        self.timeout_s = timeout_s
        self.stop_grace_s = stop_grace_s
        self._changed = threading.Condition()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stopped: str | None = None  # why stop() was called

    def run(self, directory: Path, *args: str) -> None:
        """`git -C directory args...`; RepoError naming the command and git's message when it fails, runs past
        timeout_s or is stopped."""
        with self._changed:
            if self._stopped is not None:
                raise RepoError(f"git {args[0]} in {directory} not started: {self._stopped}")
            try:
                process = subprocess.Popen(
                    ["git", "-C", str(directory), *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, env={**os.environ, **GIT_LOCALE}, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:
                raise RepoError(f"git {args[0]} in {directory} failed: {exc}") from None
            self._running.add(process)
        try:
            _, stderr = process.communicate(timeout=self.timeout_s)
        except BaseException as exc:  # past the timeout, or a stop signal in this (the main) thread
            _end_groups([process], lambda: _ended_within(process, self.stop_grace_s))
            process.communicate()
            if not isinstance(exc, subprocess.TimeoutExpired):
                raise
            stderr = f"no answer in {self.timeout_s:g} s".encode()
        finally:
            with self._changed:
                self._running.discard(process)
                self._changed.notify_all()
        if process.returncode != 0 and self._stopped is not None:
            raise RepoError(f"git {args[0]} in {directory} stopped: {self._stopped}")
        if process.returncode != 0:
            why = " ".join(stderr.decode(errors="replace").split()) or f"exit {process.returncode}"
            raise RepoError(f"git {args[0]} in {directory} failed: {why[:300]}")

    def stop(self, reason: str) -> None:
        """Each running command ended as one past its timeout is; returns once they have ended (or stop_grace_s
        after the SIGKILL). No command starts after it."""
        with self._changed:
            self._stopped = reason
            _end_groups(list(self._running), lambda: self._changed.wait_for(self._none_running, self.stop_grace_s))
            self._changed.wait_for(self._none_running, self.stop_grace_s)

    def _none_running(self) -> bool:
        return not self._running


def _end_groups(processes: list[subprocess.Popen[bytes]], ended: Callable[[], bool]) -> None:
    """SIGTERM to each process's group (a fetch removes its ref locks on it), then SIGKILL to those of processes
    still running unless ended() (which waits the grace) says they all have."""
    for process in processes:
        _signal_group(process, signal.SIGTERM)
    if not ended():
        for process in processes:
            _signal_group(process, signal.SIGKILL)


def _ended_within(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    try:
        process.communicate(timeout=timeout_s)  # reading its stderr: a full pipe must not keep it from ending
    except subprocess.TimeoutExpired:
        return False
    return True


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    if process.returncode is None:  # once reaped, its id may name another process group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)


SUBMODULES_RECORD = "bisect-submodules"  # in a worktree's admin directory: its commit's submodule paths, NUL-separated


def _record_submodules(worktree: Path, paths: list[str]) -> None:
    """Record the submodule paths of the commit checked out in the worktree (no file where it has none)."""
    record = _admin_directory(worktree) / SUBMODULES_RECORD
    if paths:
        record.write_text("\0".join(paths))
    else:
        record.unlink(missing_ok=True)


def _recorded_submodules(worktree: Path) -> list[str]:
    """The submodule paths _record_submodules recorded for the worktree ([] where none, or no worktree is there)."""
    try:
        return (_admin_directory(worktree) / SUBMODULES_RECORD).read_text().split("\0")
    except OSError:
        return []


def _admin_directory(worktree: Path) -> Path:
    """The worktree's admin directory in its repository, which its .git file names (OSError where it has none)."""
    return Path((worktree / ".git").read_text().removeprefix("gitdir:").strip())


def _in_worktree(path: Path, *args: str) -> None:
    """git run in the worktree and nowhere else, since checkout --force and clean destroy work. `-C path`: git
    enters the directory itself and fails when it is gone. The ceiling: git does not take a repository above the
    worktree for its own when the worktree's .git is gone (a cache under a git checkout)."""
    run_git(path, *args, env={"GIT_CEILING_DIRECTORIES": str(path.parent)})


class GitRepo:
    """A local git repository, opened read-mostly for bisecting.

    The trees it checks out or exports hold its submodules (vocab/submodules.py), recursively, each at the commit the
    tree records, as `git clone --recurse-submodules` gives them; a tree without a .gitmodules costs no git process
    more."""

    def __init__(self, path: str | Path, *, copies: LocalCopies | None = None) -> None:
        """copies: where this repository's submodules are on this machine (default: its own git directory and
        checkout)."""
        try:
            listed = run_git(path, "rev-parse", "--is-bare-repository", "--git-common-dir", "--show-toplevel")
        except GitCommandError as exc:  # a bare repository answers the first question, then fails on the work tree
            if exc.stdout.startswith("true"):
                raise RepoError(f"bare repositories are not supported (no work tree): {path}") from None
            if "not a git repository" in str(exc) or not Path(path).is_dir():
                raise RepoError(f"not a git repository: {path}") from None
            raise RepoError(f"git cannot open {path}: {exc}") from None  # e.g. another user's (safe.directory)
        _, common_dir, root = listed.splitlines()
        self.root = Path(root).resolve()
        self._common_dir = (Path(path) / common_dir).resolve()  # relative to path where git gives it so
        self._linked: set[Path] = set()  # worktrees found to be this repository's (checked once, not per step)
        self._copies = copies
        self._submodule_repos: dict[tuple[Path, str, str], GitRepo] = {}

    def _run(self, *args: str, errors: str = "surrogateescape") -> str:
        return run_git(self.root, *args, errors=errors)

    def mentions(self, sha: str, text: str, pathspec: str) -> bool:
        """Whether a file matching pathspec in the tree at sha holds text (False for an unreadable tree too)."""
        try:
            self._run("grep", "-q", "-I", "-F", text, sha, "--", pathspec)
        except GitCommandError:
            return False  # exit 1: no match (or an unreadable tree: nothing to rely on)
        return True

    def resolve(self, rev: str) -> str:
        """The full SHA of a commit named by a SHA prefix, branch, tag or other revision expression."""
        if not rev or rev.startswith("-"):
            raise RepoError(f"not a revision: {rev!r}")
        try:
            return self._run("rev-parse", "--verify", f"{rev}^{{commit}}")
        except GitCommandError as exc:
            if "ambiguous" not in str(exc):
                raise RepoError(f"unknown revision {rev!r} in {self.root}") from None
            named = re.findall(r"hint: +([0-9a-f]{4,}) (?:commit|tag) ", str(exc))  # git's candidates for the prefix
            which = f": it names {', '.join(named)}" if named else ""
            raise RepoError(f"ambiguous revision {rev!r} in {self.root}{which}; give more of the SHA") from None

    def first_parent_at(self, line: str, until: datetime) -> tuple[str, datetime] | None:
        """The newest commit of line's first-parent chain committed at or before until (committer date: when it
        was on that line), with its committer date; None when the chain has none that old."""
        try:
            found = self._run("log", "-1", "--first-parent", f"--before=@{int(until.timestamp())}", "--format=%H %ct",
                              self.resolve(line), "--")  # fmt: skip
        except GitCommandError as exc:
            raise RepoError(f"git log {line}: {exc}") from None
        if not found:
            return None
        sha, timestamp = found.split()
        return sha, datetime.fromtimestamp(int(timestamp), tz=UTC)

    def shallow_note(self) -> str:
        """Where history stops short of what a question needs: in a shallow clone, how to fetch the rest."""
        if self._run("rev-parse", "--is-shallow-repository") != "true":
            return ""
        return (
            f" in the history of this shallow clone, which stops at its shallow boundary: fetch the rest with "
            f"`git -C {shlex.quote(str(self.root))} fetch --unshallow`"
        )

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        try:
            self._run("merge-base", "--is-ancestor", ancestor, descendant)
        except GitCommandError:
            return False
        return True

    def commit(self, sha: str, position: int = 0) -> Commit:
        try:
            shown = self._run(
                "log", "-1", "--no-show-signature", f"--format={_COMMIT_FORMAT}", sha, "--", errors="replace"
            )
        except GitCommandError as exc:
            raise RepoError(f"reading commit {sha[:12]} failed: {exc}") from None
        full_sha, author, email, timestamp, message = shown.split("\x1f", 4)
        subject = message.strip().splitlines()[0] if message.strip() else ""
        return Commit(
            position=position,
            sha=full_sha,
            subject=subject,
            author=f"{author} <{email}>",
            date=datetime.fromtimestamp(int(timestamp), tz=UTC),
            pr=parse_pr_number(subject),
        )

    def parents(self, sha: str) -> list[str]:
        try:
            return self._run("log", "-1", "--no-show-signature", "--format=%P", sha, "--").split()
        except GitCommandError as exc:
            raise RepoError(f"reading commit {sha[:12]} failed: {exc}") from None

    def candidates(self, good: str, bad: str, paths: Sequence[str] = ()) -> list[Commit]:
        """The commits from good (position 0) to bad (the last position), oldest first, along bad's
        first-parent chain: each merge is one candidate, the usual view of a main branch. With paths, only the
        commits between that touch them (as `git bisect start -- PATH...`); the endpoints stay."""
        commits = [self.commit(good, 0), *self._first_parent_log(good, bad, paths)]
        if paths and commits[-1].sha != bad:
            commits.append(self.commit(bad, len(commits)))
        return commits

    def range_for_bisect(self, good: str, bad: str, paths: Sequence[str] = ()) -> CommitRange:
        """The first-parent chain from good to bad, validated: good an ancestor of bad on that chain. With paths,
        only the commits between that touch them are candidates (the endpoints stay). Described: the commits every
        report shows (CommitRange.shown: the ends of the range, the endpoints among them)."""
        if good == bad:
            raise RepoError(f"empty range: good and bad are the same commit {good[:12]}")
        chain = self._run("rev-list", "--first-parent", "--reverse", bad, f"^{good}")  # SHAs one a line: maybe 100,000
        oldest_first_parent = self.parents(chain.partition("\n")[0])[:1] if chain else []
        if oldest_first_parent != [good]:
            if not self.is_ancestor(good, bad):
                raise RepoError(f"good {good[:12]} is not an ancestor of bad {bad[:12]}{self.shallow_note()}")
            self._check_first_parent(good, bad, oldest_first_parent)
        if paths:
            chain = self._run("rev-list", "--first-parent", "--reverse", bad, f"^{good}", "--", *paths)
            if not chain:  # as `git bisect`: "No testable commit found"; bad would be named without touching them
                raise RepoError(
                    f"no commit after good {good[:12]} up to bad {bad[:12]} touches {' '.join(paths)}: check the paths"
                )
            if not chain.endswith(bad):
                chain = f"{chain}\n{bad}" if chain else bad
        candidates = CommitRange([good])
        candidates.extend_text(chain)
        candidates.describe(self.describe(candidates.undescribed(candidates.shown())))
        return candidates

    def describe(self, commits: Sequence[Commit]) -> list[Commit]:
        """The commits with their details (subject, author, date, PR) read from git, in one process."""
        if not commits:
            return []
        shas = list(dict.fromkeys(commit.sha for commit in commits))
        options = ["--no-walk=unsorted", "--no-show-signature", f"--format={_LOG_FORMAT}", "-z"]
        try:
            listing = self._run("log", *options, *shas, "--", errors="replace")
        except GitCommandError as exc:
            raise RepoError(f"reading commits {', '.join(s[:12] for s in shas[:3])} failed: {exc}") from None
        details = {c.sha: c for c in (_parsed(entry, 0)[0] for entry in listing.split("\0") if entry.strip())}
        missing = [sha[:12] for sha in shas if sha not in details]
        if missing:
            raise RepoError(f"git did not list the commits {', '.join(missing)}")
        return [replace(details[commit.sha], position=commit.position) for commit in commits]

    @staticmethod
    def _check_first_parent(good: str, bad: str, oldest_first_parent: list[str]) -> None:
        if oldest_first_parent != [good]:
            example = f", e.g. {oldest_first_parent[0][:12]}" if oldest_first_parent else ""
            raise RepoError(
                f"good {good[:12]} is not on the first-parent chain of bad {bad[:12]} (it came in through a merge); "
                f"choose a good commit on the main line{example}"
            )

    def _first_parent_log(self, good: str, bad: str, paths: Sequence[str] = ()) -> list[Commit]:
        """`git log --first-parent` from bad down to good (excluded), oldest first, limited to commits touching paths
        when given, described; positions from 1 (good's is 0)."""
        options = ["--reverse", "--first-parent", "--no-show-signature", f"--format={_LOG_FORMAT}", "-z"]
        listing = self._run("log", *options, bad, f"^{good}", "--", *paths, errors="replace")
        entries = (entry for entry in listing.split("\0") if entry.strip())
        return [_parsed(entry, position)[0] for position, entry in enumerate(entries, start=1)]

    def merged_branch(self, merge: str, parent: int = 1) -> list[str]:
        """The commits a merge brought in along its parent's first-parent chain (parent 1: the second parent; an
        octopus merge has more), oldest first; [] where the merge has no such parent."""
        parents = self.parents(merge)
        if len(parents) <= parent:
            return []
        return self._run("rev-list", "--reverse", "--first-parent", parents[parent], f"^{parents[0]}").split()

    def merged_count(self, merge: str) -> int:
        """How many commits a merge brought in: those reachable from its other parents and not from its first
        (`git rev-list --count`); 0 for a commit of one parent, and for a merge whose other parents are ancestors of
        its first."""
        parents = self.parents(merge)
        if len(parents) < 2:
            return 0
        try:
            return int(self._run("rev-list", "--count", *parents[1:], f"^{parents[0]}"))
        except GitCommandError as exc:
            raise RepoError(f"counting the commits merge {merge[:12]} brought failed: {exc}") from None

    def first_parent_changes(self, good: str, bad: str) -> dict[str, list[PathChange]]:
        """Each commit of the first-parent chain after good up to bad: the files and directories it changed against
        its first parent (a merge: what it brought in), renames as a deletion and an addition."""
        listing = self._run(
            "log", "--first-parent", "--diff-merges=first-parent", "--no-renames", "-t", "--raw", "--no-abbrev",
            "-z", "--format=%x01%H", bad, f"^{good}", "--",
        )  # fmt: skip
        changes: dict[str, list[PathChange]] = {}
        for chunk in listing.split("\x01")[1:]:
            sha, *fields = chunk.split("\0")
            out = changes.setdefault(sha, [])
            for meta, path in zip(fields[::2], fields[1::2], strict=False):
                old_mode, new_mode, old, new, status = meta.strip().lstrip(":").split()
                tree = "040000" in (old_mode, new_mode)
                out.append(PathChange(path, status[0], old, new, tree))
        return changes

    def files(self, sha: str) -> set[str]:
        """The paths of every file in the commit's tree."""
        return {path for path in self._run("ls-tree", "-r", "-z", "--name-only", sha).split("\0") if path}

    def line_authors(self, rev: str, path: str, since: str) -> dict[int, str]:
        """Line number (1-based) -> the commit after `since` on rev's first-parent chain that last changed that line
        of path at rev; older lines are left out."""
        try:
            listing = self._run("blame", "--porcelain", "--first-parent", f"{since}..{rev}", "--", path)
        except GitCommandError as exc:
            raise RepoError(f"git blame {path} at {rev[:12]} failed: {exc}") from None
        heads = [line.split(" ") for line in listing.splitlines() if len(line) > 40 and line[40] == " "]
        authors = {int(head[2]): head[0] for head in heads if len(head) >= 3 and head[2].isdigit()}
        return {number: sha for number, sha in authors.items() if sha != since}

    def diff(self, base: str, head: str, *paths: str) -> str:
        return self._run("diff", base, head, "--", *paths)

    def show_file(self, sha: str, path: str) -> str | None:
        try:
            return self._run("show", f"{sha}:{path}")
        except GitCommandError:
            return None

    def tree_hash(self, sha: str, path: str = "") -> str | None:
        """The hash of the tree (or blob) at path in sha, the commit's whole tree for "", None where absent."""
        try:
            return self._run("rev-parse", "--verify", "--quiet", f"{sha}:{path.rstrip('/')}")
        except GitCommandError:
            return None

    def changed_paths(self, sha: str) -> set[str]:
        """The paths the commit changes against its first parent (all of its files for a root commit)."""
        try:
            listed = self._run("diff-tree", "--root", "--no-commit-id", "--name-only", "-r", "-z", sha)
        except GitCommandError as exc:
            raise RepoError(f"listing the changes of {sha[:12]} failed: {exc}") from None
        return {path for path in listed.split("\0") if path}

    def cherry_picked_tree(self, tree: str, sha: str) -> str:
        """The tree that `git cherry-pick -n sha` makes of tree: a three-way merge of sha's change to its first parent
        (merge-ort's, renames followed), through commits made for it alone; no worktree or ref is touched. RepoError
        naming the conflicts where it does not apply."""
        try:
            base = run_git(self.root, "commit-tree", "-m", "base", f"{sha}~1^{{tree}}", env=_MADE_COMMITS)
            theirs = run_git(self.root, "commit-tree", "-m", "theirs", "-p", base, f"{sha}^{{tree}}", env=_MADE_COMMITS)
            ours = run_git(self.root, "commit-tree", "-m", "ours", "-p", base, tree, env=_MADE_COMMITS)
            return run_git(self.root, "merge-tree", "--write-tree", "--name-only", ours, theirs).splitlines()[0]
        except GitCommandError as exc:
            conflicts = [line for line in exc.stdout.splitlines() if line.startswith("CONFLICT")]
            raise RepoError("; ".join(conflicts) or str(exc)[:500]) from None

    def apply_to_tree(self, tree: str, diff: str) -> str:
        """The tree that a patch (as `git apply` reads it) makes of tree; no worktree is touched. RepoError with git's
        message where it does not apply (its context differs, a file is missing, it holds no patch)."""
        with tempfile.TemporaryDirectory(prefix="bisect-patch-") as scratch:
            patch = Path(scratch) / "patch"
            patch.write_bytes(diff.encode(errors="surrogateescape"))
            env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            try:
                run_git(self.root, "read-tree", tree, env=env)
                run_git(self.root, "apply", "--cached", "--whitespace=nowarn", str(patch), env=env)
                return run_git(self.root, "write-tree", env=env)
            except GitCommandError as exc:
                raise RepoError(str(exc)[:500]) from None

    def origin_url(self) -> str | None:
        """remote.origin.url, where the repository has one."""
        try:
            return self._run("config", "--get", "remote.origin.url").strip() or None
        except GitCommandError:
            return None

    def export_tree(self, sha: str, destination: Path) -> None:
        """The commit's tree (no .git) into destination, which must not exist yet, with its submodules' trees."""
        destination.mkdir(parents=True)
        self._export_into(sha, destination)

    def _export_into(self, sha: str, destination: Path) -> None:
        try:
            with tempfile.TemporaryFile() as archive:
                run_git(self.root, "archive", "--format=tar", sha, output=archive)
                archive.seek(0)  # tar itself unpacks: it keeps the tree's symlinks and modes as git wrote them
                subprocess.run(["tar", "-x", "-C", str(destination)], stdin=archive, check=True, capture_output=True)
        except GitCommandError as exc:
            raise RepoError(f"exporting the tree of {sha[:12]} failed: {exc}") from None
        except subprocess.CalledProcessError as exc:
            raise RepoError(
                f"unpacking the tree of {sha[:12]} failed: {exc.stderr.decode(errors='replace').strip()}"
            ) from None
        for submodule in self._submodules(destination, sha):
            (destination / submodule.path).mkdir(parents=True, exist_ok=True)
            self._submodule_repo(submodule)._export_into(submodule.sha, destination / submodule.path)

    # --- submodules ------------------------------------------------------------------------------------

    def _submodules(self, tree: Path, sha: str) -> list[Submodule]:
        """The submodules of sha, whose tree is at tree; [] without a git process where it has no .gitmodules."""
        if not (tree / GITMODULES).is_file():
            return []
        return listed(tree, self.root, sha, self._local_copies().url_base)

    def _local_copies(self) -> LocalCopies:
        if self._copies is None:  # a user's repository: its submodules are in its git directory and checkout
            self._copies = LocalCopies((self._common_dir,), (self.root,), self.origin_url() or str(self.root))
        return self._copies

    def _submodule_repo(self, submodule: Submodule) -> GitRepo:
        """The cache repository holding the submodule's commit (opened once per entry, name and path)."""
        copies = self._local_copies()
        entry = cached_repository(submodule, copies)
        key = (entry, submodule.name, submodule.path)
        if key not in self._submodule_repos:
            self._submodule_repos[key] = GitRepo(entry, copies=copies.of(submodule))
        return self._submodule_repos[key]

    # --- worktrees -------------------------------------------------------------------------------------

    def prune_worktrees(self) -> None:
        """Forget worktrees whose directories are gone (a cleared cache), so their paths can be reused."""
        try:
            self._run("worktree", "prune")
        except GitCommandError as exc:
            raise RepoError(f"git worktree prune in {self.root} failed: {exc}") from None

    def remove_worktree(self, path: Path) -> None:
        """Forget the worktree at path and remove its directory (what a step left in it goes too)."""
        with contextlib.suppress(GitCommandError):  # not registered (any more): removing the files is enough
            # --force twice: also one locked (a killed `git worktree add` leaves its registration "initializing")
            self._run("worktree", "remove", "--force", "--force", str(path))
        shutil.rmtree(path, ignore_errors=True)

    def ensure_worktree(self, path: Path, sha: str, *, clean: bool = True) -> None:
        """Check out sha in a detached worktree at path, creating it on first use and reusing it after.

        A slot found broken (its `.git` gone or not this repository's, the directory removed, git's record of it
        gone: a step may do any of that) is healed first: removed, `git worktree prune`d and added again. A
        checkout that fails in a slot that turns out broken is healed and tried once more; so is one that fails in a
        sound slot holding git's index.lock or HEAD.lock: the caller holds path alone (a claimed slot), so such a lock
        was left by a git killed mid-checkout (with its worker, or its cancelled step). RepoError only when the second
        try fails too, or the slot is sound and the checkout still fails (an unknown commit).

        ``clean=False`` skips removing untracked files, for a caller that cleaned the worktree already
        (``clean_worktree`` right after its last step, off the next step's critical path). A worktree whose last
        commit had submodules is cleaned whatever clean says: a submodule the new commit lacks goes. Each submodule
        is then a worktree of its cache repository, checked out at its commit, recursively.
        """
        had_submodules = _recorded_submodules(path)
        if not self._sound(path):
            self._make_worktree(path, sha)
        try:
            self._check_out(path, sha)
        except RepoError:
            if not self._links_here(path):
                self._make_worktree(path, sha)
            elif not self._drop_checkout_locks(path):
                raise
            self._check_out(path, sha)
        if clean or had_submodules:
            self.clean_worktree(path)
        self._check_out_submodules(path, sha, had_submodules)

    def _check_out_submodules(self, path: Path, treeish: str, previous: list[str]) -> None:
        """Each submodule of treeish (just checked out in the worktree at path) a worktree of its cache repository at
        its commit, recursively. The folder of a submodule of the previous checkout that treeish does not check out
        (`update = none`, dropped from .gitmodules, or no gitlink there any more) holds what a recursive clone of
        treeish holds there: nothing, or treeish's own files."""
        submodules = self._submodules(path, treeish)
        wanted = {submodule.path for submodule in submodules}
        for stale in previous:
            if stale not in wanted and (path / stale / ".git").exists():
                self._drop_submodule(path, treeish, stale)
        _record_submodules(path, [submodule.path for submodule in submodules])
        for submodule in submodules:
            self._submodule_repo(submodule).ensure_worktree(path / submodule.path, submodule.sha, clean=False)

    def _drop_submodule(self, path: Path, treeish: str, stale: str) -> None:
        """Remove the submodule checkout at path/stale: an empty folder is left where treeish has a gitlink there,
        treeish's files where it has a folder (restored from the worktree's index, which holds treeish)."""
        try:
            mode = self._run("ls-tree", treeish, "--", stale).partition(" ")[0]
            shutil.rmtree(path / stale)
            if mode == GITLINK_MODE:
                (path / stale).mkdir()
            elif mode:
                _in_worktree(path, "checkout", "--quiet", "--", stale)
        except (GitCommandError, OSError) as exc:
            raise RepoError(f"removing the submodule {stale} from {path} failed: {exc}") from None

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
            with self.worktree_adds_held():
                if broken:  # forget the broken slot's registration (git keeps adds in progress: "initializing")
                    self._run("worktree", "prune")
                # --force twice: also over the registration of an add killed midway, left locked ("initializing")
                self._run("worktree", "add", "--detach", "--force", "--force", "--no-checkout", str(path), sha)
        except GitCommandError as exc:
            raise RepoError(f"making the worktree {path} at {sha[:12]} failed: {exc}") from None
        except OSError as exc:
            raise RepoError(f"making the worktree {path} failed: {exc}") from None
        self._linked.add(path)

    def worktree_adds_held(self) -> contextlib.AbstractContextManager[None]:
        """No worktree of this repository is added while this is held (gitcommand.worktree_adds_held)."""
        return worktree_adds_held(self._common_dir)

    def _check_out(self, path: Path, sha: str) -> None:
        try:
            # --force resets tracked files; submodules are checked out apart (a user's submodule.recurse must not
            # make git update them with the user's repository's config)
            _in_worktree(path, "-c", "submodule.recurse=false", "checkout", "--detach", "--force", "--quiet", sha)
        except GitCommandError as exc:
            raise RepoError(f"checkout of {sha[:12]} in {path} failed: {exc}") from None

    def _drop_checkout_locks(self, path: Path) -> bool:
        """Remove the index.lock and HEAD.lock in the worktree's admin directory; whether there was one."""
        admin = _admin_directory(path)
        dropped = False
        for name in ("index.lock", "HEAD.lock"):
            with contextlib.suppress(FileNotFoundError):
                (admin / name).unlink()
                dropped = True
        return dropped

    def _links_here(self, path: Path) -> bool:
        """Whether the worktree at path is one of this repository's: its .git file names an admin directory
        of this repository that names it back, and that git does not hold locked (as a `git worktree add` killed
        midway leaves it, "initializing", its HEAD perhaps the null id)."""
        try:
            admin = _admin_directory(path)
            back = Path((admin / "gitdir").read_text().strip())
        except OSError:
            return False
        mine = self._common_dir
        linked = admin.resolve().parent.parent == mine and back.resolve() == (path / ".git").resolve()
        return linked and not (admin / "locked").exists()

    def check_out_tree(self, path: Path, tree: str) -> None:
        """Put tree's files in the worktree at path, staged on its commit (as `git cherry-pick -n` leaves them), and
        its submodules at the commits its gitlinks name, as ensure_worktree puts a commit's; the next ensure_worktree
        undoes it."""
        checked_out = _recorded_submodules(path)
        try:
            _in_worktree(path, "read-tree", "--reset", "-u", tree)
        except GitCommandError as exc:
            raise RepoError(f"checking out tree {tree[:12]} in {path} failed: {exc}") from None
        self._check_out_submodules(path, tree, checked_out)

    def clean_worktree(self, path: Path) -> None:
        """Remove the untracked files a step left in a worktree and in its submodules' (ignored ones stay, as build
        caches); a submodule directory the checked-out commit no longer has goes whole. The submodules are those
        ensure_worktree recorded for the commit it checked out (what a step did to .gitmodules does not count)."""
        try:
            _in_worktree(path, "clean", "-ffd", "--quiet")
        except GitCommandError as exc:
            raise RepoError(f"cleaning {path} failed: {exc}") from None
        for submodule in _recorded_submodules(path):
            if (path / submodule / ".git").is_file():
                self.clean_worktree(path / submodule)
