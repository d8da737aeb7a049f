"""The submodules of a step's tree, as `git clone --recurse-submodules` gives them, without touching the user's
checkout or its config: which ones a tree records, and a cache repository that holds the commit each one needs.

The cache has one repository per submodule URL (`<cache dir>/submodules/<hash of the URL>`, one for the spellings of one
repository's URL: _same_repository; locked by `<hash>.lock` while it is made, borrows or takes fetched objects in; made
beside its place and renamed in, renamed aside before it is removed: a process killed at any moment leaves it whole or
absent). It borrows the objects already on this machine through git's alternates (the user's `.git/modules/<name>`,
and the submodule's own checkout in the user's tree) and fetches from the URL only a commit found whole (its trees and
blobs too) in none of them, one fetch at a time (`<hash>.fetch.lock`), so one fetch serves every worker and every later
bisect. A fetch reads the URL into an incoming repository of its own that borrows the entry's objects, without the
entry's lock, then takes what came in with a short local fetch under it: a URL slow to answer holds up no use of the
commits the entry has, nor any worktree add of it. Its own objects are only
what it fetched; gc is off in it, so a fetched commit no ref names stays. A worktree's submodules are linked worktrees
of these repositories (gitrepo.py). Each use touches the marker `<entry>/.git/bisect-used`; prune_cache removes a
repository no worktree is registered in and none used for UNUSED_S.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bisector.vocab.errors import RepoError
from bisector.vocab.gitcommand import GitCommandError, run_git, worktree_adds_held
from bisector.vocab.incoming import fetch_through_incoming
from bisector.vocab.paths import cache_dir, tree_size

GITMODULES = ".gitmodules"
GITLINK_MODE = "160000"
FETCH_TIMEOUT_S = 900.0  # a fetch hung on the network ends as an infrastructure error of the step
UNUSED_S = 24 * 3600  # a cache repository unused for this long is removed by prune_cache (fetched again when wanted)
USED_MARKER = "bisect-used"  # in the entry's .git: touched on each use, its mtime the last one
_NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0"}  # a URL that asks for credentials fails instead of waiting for a user


@dataclass(frozen=True)
class Submodule:
    name: str  # its name in .gitmodules (the folder under .git/modules)
    path: str  # where the tree has its gitlink
    url: str  # resolved: a relative URL of .gitmodules is made absolute against the superproject's
    sha: str  # the commit the tree records for it


@dataclass(frozen=True)
class LocalCopies:
    """Where a repository's submodules may already be on this machine."""

    git_dirs: tuple[Path, ...]  # the repository's git directories: their modules/<name> hold submodules
    checkouts: tuple[Path, ...]  # its checkouts: their <path> may hold a submodule's own checkout
    url_base: str  # what a relative URL of .gitmodules is relative to (the repository's own URL)

    def object_dirs(self, submodule: Submodule) -> list[Path]:
        """The object directories on this machine that may hold the submodule's commits."""
        git_dirs = [*(d / "modules" / submodule.name for d in self.git_dirs)]
        git_dirs += [found for c in self.checkouts if (found := _git_dir(c / submodule.path)) is not None]
        objects = [(_common_dir(d) / "objects").resolve() for d in git_dirs]
        return list(dict.fromkeys(o for o in objects if o.is_dir()))

    def of(self, submodule: Submodule) -> LocalCopies:
        """Where the submodule's own submodules may be."""
        git_dirs = tuple(d / "modules" / submodule.name for d in self.git_dirs)
        return LocalCopies(git_dirs, tuple(c / submodule.path for c in self.checkouts), submodule.url)


def listed(tree: Path, repo: Path, treeish: str, url_base: str) -> list[Submodule]:
    """The submodules of treeish (its tree checked out or exported at tree; its objects in the repository at repo):
    each gitlink that tree/.gitmodules names, with its commit, but those it marks `update = none` (a recursive clone
    leaves their folders empty). [] where tree has no .gitmodules (no git runs)."""
    try:
        fields = _gitmodules(tree)
    except GitCommandError as exc:
        raise RepoError(f"reading {GITMODULES} of {treeish[:12]} failed: {exc}") from None
    names = {
        f["path"].strip("/"): name
        for name, f in fields.items()
        if f.get("path") and f.get("url") and f.get("update") != "none"
    }
    if not names:
        return []
    try:
        entries = run_git(repo, "ls-tree", "-z", treeish, "--", *names).split("\0")
    except GitCommandError as exc:
        raise RepoError(f"listing the submodules of {treeish[:12]} failed: {exc}") from None
    found = []
    for entry in filter(None, entries):
        meta, _, path = entry.partition("\t")
        mode, _, sha = meta.split(" ")
        if mode == GITLINK_MODE and path in names:
            name = names[path]
            url = absolute_url(url_base, fields[name]["url"])
            if url.startswith("-"):  # git refuses it too: a fetch would read it as an option
                raise RepoError(f"submodule {path} of {treeish[:12]}: its URL {url!r} would be read as an option")
            found.append(Submodule(name, path, url, sha))
    return found


def absolute_url(base: str, url: str) -> str:
    """url of .gitmodules, made absolute as git does: `./x` and `../x` are relative to base (the superproject's
    remote URL, or its folder where it has none); `../` drops base's last `/` part, or its `:path` where it has no
    `/` left (an scp-like `host:path`)."""
    if not url.startswith(("./", "../")):
        return url
    base = base.removesuffix("/")
    separator = "/"
    while url.startswith(("./", "../")):
        head, _, url = url.partition("/")
        if head == "..":
            cut = base.rfind("/")
            if cut < 0 and (cut := base.rfind(":")) >= 0:
                separator = ":"
            base = base[:cut] if cut >= 0 else "."
    return f"{base}{separator}{url}".removesuffix("/")


def _gitmodules(tree: Path) -> dict[str, dict[str, str]]:
    """tree/.gitmodules as {name: {field: value}} ({} without one, no git run); GitCommandError where git cannot
    read it."""
    if not (tree / GITMODULES).is_file():
        return {}
    fields: dict[str, dict[str, str]] = {}
    for entry in filter(None, run_git(tree, "config", "--file", GITMODULES, "--null", "--list").split("\0")):
        key, _, value = entry.partition("\n")
        section, _, rest = key.partition(".")
        name, _, field = rest.rpartition(".")
        if section == "submodule" and name:
            fields.setdefault(name, {})[field] = value
    return fields


def cache_repositories() -> list[Path]:
    """The submodule cache's repositories (not the leftovers of a maker or remover killed midway)."""
    root = cache_dir() / "submodules"
    return sorted(e for e in root.iterdir() if e.is_dir() and "." not in e.name) if root.is_dir() else []


def prune_cache(unused_s: float = UNUSED_S) -> dict[Path, int]:
    """Remove the cache repositories none used for unused_s that no worktree is registered in any more (their
    registrations of removed worktrees forgotten first), and what killed makers and removers left, each under its
    lock taken without waiting: one being made, borrowed into or fetched into stays. A repository goes whole: renamed
    aside, then removed. Returns those removed, with their sizes in bytes. The lock files stay (one removed under a
    waiting process would let two hold the lock)."""
    root = cache_dir() / "submodules"
    removed = {}
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        key, _, leftover = folder.name.partition(".")
        if not folder.is_dir():
            continue
        with _locked(root / f"{key}.lock", wait=False) as held:
            if not held:
                continue
            if leftover:
                shutil.rmtree(folder, ignore_errors=True)
                continue
            with contextlib.suppress(GitCommandError):  # forgotten by a later prune; meanwhile the entry is kept
                _forget_removed_worktrees(folder)
            if _last_used(folder) > time.time() - unused_s or any((folder / ".git" / "worktrees").glob("*")):
                continue
            removed[folder] = tree_size(folder)
            aside = root / f"{key}.removed"
            shutil.rmtree(aside, ignore_errors=True)
            folder.rename(aside)
            shutil.rmtree(aside, ignore_errors=True)
    return removed


def _forget_removed_worktrees(entry: Path) -> None:
    """`git worktree prune` in the entry, over the registrations a killed `git worktree add` left locked
    ("initializing", which prune skips) too: under the entry's worktree-add lock, no add is in progress."""
    git_dir = entry / ".git"
    with worktree_adds_held(git_dir):
        for admin in (git_dir / "worktrees").glob("*"):
            try:
                gone = not Path((admin / "gitdir").read_text().strip()).exists()
            except OSError:
                gone = True
            if gone:
                (admin / "locked").unlink(missing_ok=True)
        run_git(entry, "worktree", "prune")


def _last_used(entry: Path) -> float:
    """When the entry was last used: its marker's mtime (its folder's where it has no marker)."""
    try:
        return (entry / ".git" / USED_MARKER).stat().st_mtime
    except OSError:
        return entry.stat().st_mtime


def cached_repository(submodule: Submodule, copies: LocalCopies) -> Path:
    """The cache repository of the submodule's URL, made where missing, holding the submodule's commit: borrowed
    from the copies on this machine, else fetched from its URL. RepoError naming the submodule and the commit where
    neither has it (an infrastructure error of the step, never a verdict on the commit)."""
    root = cache_dir() / "submodules"
    key = hashlib.sha256(_same_repository(submodule.url).encode()).hexdigest()[:16]
    entry = root / key
    lock = root / f"{key}.lock"
    with _locked(lock):
        try:
            if not entry.is_dir():
                _make(entry)
            (entry / ".git" / USED_MARKER).touch()
            if _holds(entry, submodule.sha):
                return entry
            _borrow(entry, copies.object_dirs(submodule))
            if _holds(entry, submodule.sha):
                return entry
        except (GitCommandError, OSError) as exc:
            raise RepoError(f"submodule {submodule.path}: its cache repository {entry} failed: {exc}") from None
    with _locked(root / f"{key}.fetch.lock"):  # one fetch from the URL at a time; the entry's users go on meanwhile
        why = _fetch(entry, submodule, lock)
    if not why:
        return entry
    raise RepoError(
        f"submodule {submodule.path} needs commit {submodule.sha[:12]}, which no repository on this machine holds "
        f"and {submodule.url} did not give: {why}"
    )


_NETWORK_URL = re.compile(r"(?:https?|ssh|git|git\+ssh|ssh\+git)://(?:[^@/]*@)?([^/:]+)(?::[0-9]*)?(/.*)?", re.I)
_SCP_LIKE = re.compile(r"(?:[^@/]*@)?([^/:]+):(?!//)(.*)")  # `[user@]host:path`: git's rule, a `:` before any `/`


def _same_repository(url: str) -> str:
    """What the cache keys a URL by: the same for the spellings of one repository's URL (a trailing `/` or `.git`;
    https, ssh, git or scp-like `host:path`, with any user and port, the host in any case), the URL itself for a
    local path without those suffixes."""
    trimmed = url
    while trimmed != (trimmed := trimmed.removesuffix("/").removesuffix(".git")):
        pass
    if found := _NETWORK_URL.fullmatch(trimmed) or _SCP_LIKE.fullmatch(trimmed):
        host, path = found.groups()
        return f"//{host.lower()}/{(path or '').lstrip('/')}"  # `//`: no local path reads so
    return trimmed


def _make(entry: Path) -> None:
    """A cache repository at entry, whole or not there: made beside it (no template: no hooks), renamed into place."""
    draft = entry.with_name(f"{entry.name}.draft")
    shutil.rmtree(draft, ignore_errors=True)  # a killed maker's
    run_git(entry.parent, "init", "--quiet", "--template=", str(draft))
    run_git(draft, "config", "gc.auto", "0")
    draft.rename(entry)


def _fetch(entry: Path, submodule: Submodule, lock: Path) -> str:
    """Fetch the submodule's branches and tags from its URL, then its commit by SHA where they lack it; "" once the
    entry holds the commit whole (a fetch before this one may have brought it), else why not. Where the commit came
    but not whole (the entry lost objects its refs' histories need, borrowed from a repository since removed or
    pruned: the fetch told the URL it had them), the same fetches run again with --refetch, as a fresh clone would.
    Each goes through _fetch_through_incoming."""
    branches = ("+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
    taken_branches = ("+refs/remotes/origin/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
    wanted = (f"{submodule.sha}:refs/wanted",)
    why = ""
    for negotiation in ((), ("--refetch",)):
        for fetched, taken in ((branches, taken_branches), (wanted, (submodule.sha,))):
            if _holds(entry, submodule.sha):
                return ""
            try:
                _fetch_through_incoming(entry, submodule.url, negotiation, fetched, taken, lock)
            except GitCommandError as exc:
                why = str(exc)[:300]
        if _holds(entry, submodule.sha):
            return ""
        if not _git_succeeds(entry, "cat-file", "-e", f"{submodule.sha}^{{commit}}"):
            break
    return why or "it has no such commit"


def _fetch_through_incoming(
    entry: Path, url: str, negotiation: tuple[str, ...], fetched: tuple[str, ...], taken: tuple[str, ...], lock: Path
) -> None:
    """Fetch refspecs `fetched` from url into the entry's incoming repository without the entry's lock, then, under
    that lock, refspecs `taken` from it into the entry (vocab/incoming.py)."""
    options = ("--quiet", "--no-tags", "--no-write-fetch-head", *negotiation)
    fetch_through_incoming(_fetching_git, entry, url, options, fetched, taken, _fetch_lock(entry, lock))


def _fetching_git(directory: Path, *args: str) -> str:
    return run_git(directory, *args, env=_NO_PROMPT, timeout=FETCH_TIMEOUT_S)


@contextlib.contextmanager
def _fetch_lock(entry: Path, lock: Path) -> Iterator[None]:
    """The entry's lock, its ref locks left by a killed fetch removed: every fetch into the entry runs under it, so
    none of them is live."""
    with _locked(lock):
        git_dir = entry / ".git"
        for stale in [*(git_dir / "refs").rglob("*.lock"), git_dir / "packed-refs.lock"]:
            stale.unlink(missing_ok=True)
        yield


def _holds(entry: Path, sha: str) -> bool:
    """Whether the entry can check the commit out: its commit, trees and blobs all readable (its own objects or those
    it borrows). The commit's history is not read."""
    return _git_succeeds(entry, "rev-list", "--quiet", "--objects", "--no-walk", f"{sha}^{{commit}}", "--")


def _git_succeeds(entry: Path, *args: str) -> bool:
    try:
        run_git(entry, *args)
    except GitCommandError:
        return False
    return True


def _borrow(entry: Path, object_dirs: list[Path]) -> None:
    """Add the object directories to the entry's alternates (git reads their objects in place)."""
    alternates = entry / ".git" / "objects" / "info" / "alternates"
    listed_before = alternates.read_text().splitlines() if alternates.is_file() else []
    known = [line for line in listed_before if Path(line).is_dir()]  # a repository removed since is forgotten
    wanted = list(dict.fromkeys([*known, *map(str, object_dirs)]))
    if wanted != listed_before:  # written whole and renamed: a git reading it meanwhile sees the old list or the new
        temporary = alternates.with_name(f"alternates.{os.getpid()}.tmp")
        temporary.write_text("".join(f"{line}\n" for line in wanted))
        temporary.replace(alternates)


def _git_dir(checkout: Path) -> Path | None:
    """The git directory of a checkout: its .git folder, or the one its .git file names."""
    dot_git = checkout / ".git"
    if dot_git.is_dir():
        return dot_git
    try:
        named = dot_git.read_text().removeprefix("gitdir:").strip()
    except OSError:
        return None
    return checkout / named  # relative to the checkout where git wrote it so


def _common_dir(git_dir: Path) -> Path:
    """A linked worktree's git directory names the repository's in its commondir file."""
    try:
        return git_dir / (git_dir / "commondir").read_text().strip()
    except OSError:
        return git_dir


@contextlib.contextmanager
def _locked(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the lock file's flock; yields whether it is held (False only without wait, where another holds it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
