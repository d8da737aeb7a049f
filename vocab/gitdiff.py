"""The git layer's diff side, for the explainer (GitPython underneath; gitrepo.py is the git CLI side: ranges,
worktrees, logs).

Changed files of a commit with rename detection, file contents and modes at a revision, zero-context hunks,
and variant commits (the parent's tree with some files replaced) built with a private index, so that neither
the repository's work tree nor its index is touched. `Repo` and `GitError` are GitPython's, named here so that no
module outside vocab/ imports GitPython itself.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import TypeVar

import git

from bisector.vocab.errors import RepoError

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # what a root commit is diffed against
VARIANT_IDENTITY = {
    "GIT_AUTHOR_NAME": "gpu-bisect",
    "GIT_AUTHOR_EMAIL": "gpu-bisect@localhost",
    "GIT_COMMITTER_NAME": "gpu-bisect",
    "GIT_COMMITTER_EMAIL": "gpu-bisect@localhost",
}
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
_DIFF_FLAGS = ("--no-color", "--no-ext-diff", "--no-textconv", "-M")


@dataclass(frozen=True)
class FileChange:
    """One file of a commit's diff against its parent. status: A(dded), M(odified), D(eleted), R(enamed),
    C(opied), T(ype changed)."""

    status: str
    old_path: str | None
    new_path: str | None

    @property
    def path(self) -> str:
        """The path the file has after the commit (before it, for a deletion)."""
        return self.new_path or self.old_path or ""

    @property
    def renamed(self) -> bool:
        return self.old_path is not None and self.new_path is not None and self.old_path != self.new_path


@dataclass(frozen=True)
class Hunk:
    """A zero-context hunk as line ranges: old lines [old_lo, old_hi) become new lines [new_lo, new_hi)
    (0-based, half-open; an empty old range is an insertion before old line old_lo)."""

    old_lo: int
    old_hi: int
    new_lo: int
    new_hi: int
    header: str = ""  # the function context git prints after @@


Changed = TypeVar("Changed", int, tuple[int, str])  # a changed line: its index, or (index, what it is)


def line_text(line: str) -> str:
    """A line's text with its whitespace runs as one space: a line re-indented is the same line."""
    return " ".join(line.split())


def unmoved(
    removed: list[Changed], added: list[Changed], old_lines: list[str], new_lines: list[str]
) -> tuple[list[Changed], list[Changed]]:
    """The removed and added lines less as many of each text as the other side has: a line removed and added again
    (whitespace aside) only moved."""

    def index(line: Changed) -> int:
        return line if isinstance(line, int) else line[0]

    moved = Counter(line_text(old_lines[index(i)]) for i in removed) & Counter(
        line_text(new_lines[index(i)]) for i in added
    )

    def kept(changed: list[Changed], lines: list[str]) -> list[Changed]:
        left, out = Counter(moved), []
        for line in changed:
            text = line_text(lines[index(line)])
            if left[text] > 0:
                left[text] -= 1
            else:
                out.append(line)
        return out

    return kept(removed, old_lines), kept(added, new_lines)


Repo = git.Repo
GitError = git.GitCommandError


@dataclass(frozen=True)
class FileVersion:
    mode: str  # "100644", "100755", "120000" (symlink)
    data: bytes


def open_repo(path: str | os.PathLike[str]) -> git.Repo:
    try:
        repo = git.Repo(path, search_parent_directories=True)
    except (git.NoSuchPathError, git.InvalidGitRepositoryError):
        raise RepoError(f"not a git repository: {path}") from None
    return repo


def resolve_commit(repo: git.Repo, rev: str) -> str:
    if not rev or rev.startswith("-"):
        raise RepoError(f"not a revision: {rev!r}")
    try:
        return str(repo.git.rev_parse("--verify", "--quiet", f"{rev}^{{commit}}"))
    except git.GitCommandError:
        raise RepoError(f"unknown revision {rev!r}") from None


def first_parent(repo: git.Repo, sha: str) -> str | None:
    parents = repo.commit(sha).parents
    return parents[0].hexsha if parents else None


def changed_files(repo: git.Repo, parent: str | None, sha: str) -> list[FileChange]:
    """The files sha changes against parent (None: a root commit), renames detected as git shows them."""
    raw = str(repo.git.diff("--name-status", "-z", *_DIFF_FLAGS, parent or EMPTY_TREE, sha))
    fields = raw.split("\0")
    changes: list[FileChange] = []
    index = 0
    while index < len(fields) and fields[index]:
        status = fields[index][0]
        if status in "RC":
            changes.append(FileChange(status, fields[index + 1], fields[index + 2]))
            index += 3
            continue
        path = fields[index + 1]
        changes.append(FileChange(status, None if status == "A" else path, None if status == "D" else path))
        index += 2
    return changes


def file_at(repo: git.Repo, sha: str | None, path: str | None, max_bytes: int | None = None) -> FileVersion | None:
    """The file's mode and bytes at sha; None if absent (or not a file: a submodule). Over max_bytes: data b""."""
    if sha is None or path is None:
        return None
    try:
        entry = repo.commit(sha).tree / path
    except KeyError:
        return None
    if not isinstance(entry, git.Blob):
        return None
    mode = f"{entry.mode:o}"
    if max_bytes is not None and entry.size > max_bytes:
        return FileVersion(mode, b"")
    return FileVersion(mode, entry.data_stream.read())


@dataclass(frozen=True)
class BlobEntry:
    mode: str
    sha: str
    size: int  # -1: unknown (the object is missing)


def blob_entries(repo: git.Repo, rev: str, paths: list[str], chunk: int = 400) -> dict[str, BlobEntry]:
    """Mode, blob id and size of each path that is a file at rev, in one `git ls-tree` per chunk of paths
    (walking trees object by object costs a round trip per directory level and file)."""
    entries: dict[str, BlobEntry] = {}
    for start in range(0, len(paths), chunk):
        listing = str(repo.git.ls_tree("-l", "-z", "--full-tree", rev, "--", *paths[start : start + chunk]))
        for record in listing.split("\0"):
            meta, _, path = record.partition("\t")
            fields = meta.split()
            if len(fields) == 4 and fields[1] == "blob":  # size "-": git lacks the object (read it to say so)
                entries[path] = BlobEntry(fields[0], fields[2], int(fields[3]) if fields[3].isdigit() else -1)
    return entries


def blob_data(repo: git.Repo, blob_sha: str) -> bytes:
    return bytes(repo.odb.stream(bytes.fromhex(blob_sha)).read())


def file_hunks(repo: git.Repo, parent: str | None, sha: str, change: FileChange) -> list[Hunk]:
    """Zero-context hunks of one changed file (none for binary files and pure renames or mode changes)."""
    return _hunks(_patch(repo, parent, sha, _paths(change)).splitlines())


def hunks_of(
    repo: git.Repo, parent: str | None, sha: str, changes: list[FileChange], chunk: int = 400
) -> dict[FileChange, list[Hunk]]:
    """file_hunks of many changed files with one `git diff` per chunk of them. A file whose section of the patch
    cannot be told by its header (a quoted path) is diffed on its own."""
    found: dict[FileChange, list[Hunk]] = {}
    for start in range(0, len(changes), chunk):
        part = changes[start : start + chunk]
        by_header = {f"diff --git a/{c.old_path or c.new_path} b/{c.new_path or c.old_path}": c for c in part}
        paths = list(dict.fromkeys(p for c in part for p in _paths(c)))
        for section in _SECTION.split(_patch(repo, parent, sha, paths)):
            header, _, body = section.partition("\n")
            change = by_header.get(header)
            if change is not None and change not in found:
                found[change] = _hunks(body.splitlines())
    for change in changes:
        if change not in found:
            found[change] = file_hunks(repo, parent, sha, change)
    return found


_SECTION = re.compile(r"^(?=diff --git )", re.M)


def _paths(change: FileChange) -> list[str]:
    return [p for p in dict.fromkeys((change.old_path, change.new_path)) if p]


def _patch(repo: git.Repo, parent: str | None, sha: str, paths: list[str]) -> str:
    raw = repo.git.diff("-U0", *_DIFF_FLAGS, parent or EMPTY_TREE, sha, "--", *paths, stdout_as_string=False)
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def _hunks(lines: list[str]) -> list[Hunk]:
    hunks: list[Hunk] = []
    for line in lines:
        match = _HUNK_HEADER.match(line)
        if match is None:
            continue
        old_start, old_count = int(match[1]), int(match[2] if match[2] is not None else 1)
        new_start, new_count = int(match[3]), int(match[4] if match[4] is not None else 1)
        old_lo = old_start if old_count == 0 else old_start - 1
        new_lo = new_start if new_count == 0 else new_start - 1
        hunks.append(Hunk(old_lo, old_lo + old_count, new_lo, new_lo + new_count, match[5].strip()))
    return hunks


def write_variant(repo: git.Repo, parent: str, files: dict[str, FileVersion | None], message: str, date: str) -> str:
    """A commit object (on no branch) whose tree is parent's with files replaced (None: removed).

    The same files give the same SHA (fixed identity and date), so a variant tested twice is one commit.
    """
    environment = {**VARIANT_IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    with tempfile.TemporaryDirectory(prefix="gpu-bisect-index-") as scratch:
        environment["GIT_INDEX_FILE"] = os.path.join(scratch, "index")
        content = os.path.join(scratch, "content")
        try:
            repo.git.read_tree(parent, env=environment)
            for path, version in sorted(files.items()):
                if version is None:
                    repo.git.update_index("--force-remove", "--", path, env=environment)
                    continue
                with open(content, "wb") as out:
                    out.write(version.data)
                blob_sha = str(repo.git.hash_object("-w", "--no-filters", content))
                repo.git.update_index("--add", "--cacheinfo", f"{version.mode},{blob_sha},{path}", env=environment)
            tree = str(repo.git.write_tree(env=environment))
            return str(repo.git.commit_tree(tree, "-p", parent, "-m", message, env=environment))
        except git.GitCommandError as exc:
            raise RepoError(f"could not build a variant of {parent[:12]}: {exc.stderr or exc}") from None


def commit_date(repo: git.Repo, sha: str) -> str:
    """The commit's committer date in git's raw format ("<epoch> <tz>")."""
    commit = repo.commit(sha)
    offset = -commit.committer_tz_offset  # GitPython keeps seconds west of UTC
    sign = "+" if offset >= 0 else "-"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{commit.committed_date} {sign}{hours:02d}{minutes:02d}"
