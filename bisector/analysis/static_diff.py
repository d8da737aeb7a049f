"""Static table diff of a commit against its parent, in every changed file that a reader claims (readers.py:
Python, tuning files, Rust, C / C++ / CUDA / HIP, CMake). A file that cannot be analysed in one version
(syntax error, binary, too large) gives a note instead of rows. Then rows of last resort for the files with none.

A file added or removed whole is new (or dropped) code, not a change of the dispatch inside it: its entries are
not rows (the callers or includes that start or stop using it change too, and those files are compared); it is
named in a note instead, grouped by directory when there are many. Tuning files by their path (file_roles), and
sources whose head says a tuning run generated them (whole_files.py), are the exception: a tuning file added or
removed is new or dropped tuning, so its entries are rows.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from bisector.analysis.changed_branches import BranchChange, last_resort_rows
from bisector.analysis.env_gates import annotate_env_gates
from bisector.analysis.file_roles import users_only
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.readers import READERS, FileRows, FileVersions, Reader, UnreadableError, reader_for
from bisector.analysis.rules import produce
from bisector.analysis.whole_files import generated_tuning_paths, whole_file_notes
from bisector.vocab import gitdiff

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_ROWS_PER_FILE = 400
_BINARY_PROBE_BYTES = 8000  # git's own heuristic: a NUL byte in the first 8000 bytes means binary


@dataclass(frozen=True)
class StaticDiff:
    repo: str
    sha: str
    parent: str | None
    findings: tuple[Finding, ...]
    files: tuple[str, ...] = ()  # the changed files (paths after the commit)
    file_count: int | None = None  # len(files) unless rebuilt from stored rows, which keep only the count

    @property
    def changed_file_count(self) -> int:
        return len(self.files) if self.file_count is None else self.file_count

    @property
    def table_findings(self) -> tuple[Finding, ...]:
        """Everything but notes: the rows that change what a dispatcher decides."""
        return tuple(f for f in self.findings if f.kind.is_dispatch_relevant)

    @property
    def notes(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.kind is FindingKind.NOTE)

    @property
    def kernel_changes(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.kind is FindingKind.KERNEL_CODE)

    @property
    def changes_dispatch(self) -> bool:
        return bool(self.table_findings)

    def to_json(self) -> dict[str, object]:
        return {
            "repo": self.repo,
            "sha": self.sha,
            "parent": self.parent,
            "files": list(self.files),
            "file_count": self.changed_file_count,
            "findings": [f.to_json() for f in self.findings],
        }

    def to_findings(self) -> list[Finding]:
        """The rows to store, led by a summary row (so that 'no table changed' survives the round trip)."""
        summary = Finding(
            FindingKind.STATIC_SUMMARY, file="", name="static diff", key=self.sha, before=self.parent,
            detail=f"files={self.changed_file_count}",
        )  # fmt: skip
        return [summary, *self.findings]

    @classmethod
    def from_findings(cls, findings: Sequence[Finding]) -> StaticDiff | None:
        summary = next((f for f in findings if f.kind is FindingKind.STATIC_SUMMARY), None)
        if summary is None:
            return None
        rows = tuple(f for f in findings if f.kind.is_static)
        count = summary.detail.removeprefix("files=")
        files = tuple(dict.fromkeys(f.file for f in rows))
        return cls("", summary.key, summary.before, rows, files, int(count) if count.isdigit() else len(files))


def explain(
    repo_path: str | os.PathLike[str],
    culprit: str,
    parent: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
    readers: Sequence[Reader] = READERS,
) -> StaticDiff:
    """The explainer's one entry: the findings of commit culprit (any revision) against parent (default: its first
    parent), each changed file read by its reader (readers.py: the first in readers that claims it). With env (the
    bisect's test environment), each environment-gate row says whether env sets its variable."""
    collecting = gc.isenabled()
    gc.disable()  # parsed modules live to the end (rows of last resort) and make no cycles: collections only cost
    try:
        diff = _diff_commit(repo_path, culprit, parent, max_file_bytes, readers)
    finally:  # once the parsed modules are freed: a collection right after the diff would walk all their nodes
        if collecting:
            gc.enable()
    if env is None:
        return diff
    return replace(diff, findings=tuple(annotate_env_gates(list(diff.findings), env)))


def _diff_commit(
    repo_path: str | os.PathLike[str],
    sha: str,
    parent: str | None,
    max_file_bytes: int,
    readers: Sequence[Reader],
) -> StaticDiff:
    repo = gitdiff.open_repo(repo_path)
    try:
        commit = gitdiff.resolve_commit(repo, sha)
        base = gitdiff.resolve_commit(repo, parent) if parent else gitdiff.first_parent(repo, commit)
        changes = gitdiff.changed_files(repo, base, commit)
        reader = {c.path: found for c in changes if (found := reader_for(c.path, readers)) is not None}
        whole = [c for c in changes if c.path in reader and _added_or_removed_whole(c, reader[c.path])]
        tuned = generated_tuning_paths(repo, base, commit, [c for c in whole if reader[c.path].generated_tuning])
        whole = [c for c in whole if c.path not in tuned]  # tuning results a script wrote: rows, as a tuning file's
        readable = [c for c in changes if c.path in reader and c not in whole]
        blobs = {
            base: gitdiff.blob_entries(repo, base, [c.old_path for c in readable if c.old_path]) if base else {},
            commit: gitdiff.blob_entries(repo, commit, [c.new_path for c in readable if c.new_path]),
        }
        by_lines = [c for c in readable if reader[c.path].needs_hunks]
        hunks = gitdiff.hunks_of(repo, base, commit, by_lines) if by_lines else {}
        findings: list[Finding] = []
        analyses = [
            _FileAnalysis(repo, base, commit, c, reader[c.path], max_file_bytes, blobs, hunks.get(c, []))
            for c in readable
        ]
        for analysis in analyses:
            findings.extend(_capped(analysis.findings(), analysis.path))
        with_rows = {row.file for row in findings if row.kind.is_dispatch_relevant}
        branch_changes = [c for a in analyses if a.path not in with_rows for c in a.branch_changes()]
        findings.extend(produce("branch_tests", last_resort_rows, branch_changes))
        findings.extend(whole_file_notes(whole))
    finally:
        repo.close()
    return StaticDiff(str(repo_path), commit, base, tuple(findings), tuple(change.path for change in changes))


def _capped(rows: list[Finding], path: str) -> list[Finding]:
    if len(rows) <= MAX_ROWS_PER_FILE:
        return rows
    more = f"{len(rows) - MAX_ROWS_PER_FILE} more changed rows not listed"
    return [*rows[:MAX_ROWS_PER_FILE], Finding(FindingKind.NOTE, path, "rows cut", detail=more)]


def _added_or_removed_whole(change: gitdiff.FileChange, reader: Reader) -> bool:
    """A file the commit adds or removes whole whose reader gives it no rows then: new (or dropped) code."""
    both = change.old_path is not None and change.new_path is not None
    return not both and not reader.rows_when_whole(change.path)


@dataclass
class _FileAnalysis:
    repo: gitdiff.Repo
    parent: str | None
    sha: str
    change: gitdiff.FileChange
    reader: Reader
    max_bytes: int
    blobs: dict[str | None, dict[str, gitdiff.BlobEntry]]  # revision -> path -> blob, listed once for all files
    hunks: list[gitdiff.Hunk]  # for a reader that needs them, diffed once for all files
    read: FileRows | None = None  # once the reader has read both versions

    @property
    def path(self) -> str:
        return self.change.path

    def findings(self) -> list[Finding]:
        notes = []
        if self.change.renamed:
            notes.append(self._note("renamed", f"renamed from {self.change.old_path}", before=self.change.old_path))
        try:
            old = self._version(self.parent, self.change.old_path if self.change.status != "A" else None)
            new = self._version(self.sha, self.change.new_path)
            self.read = self.reader.read(FileVersions(self.path, old, new, (self.parent, self.sha), self.hunks))
            return notes + self.read.rows
        except UnreadableError as why:
            return notes if self.reader.quiet_when_unreadable else [*notes, self._note("not analysed", str(why))]

    def _version(self, sha: str | None, path: str | None) -> bytes | None:
        if sha is None or path is None:
            return None
        entry = self.blobs.get(sha, {}).get(path)
        if entry is None:
            return None  # not a file at sha (absent, a submodule)
        if entry.size > self.max_bytes:
            raise UnreadableError(f"{entry.size} bytes at {sha[:12]}, over the {self.max_bytes}-byte limit")
        try:
            data = gitdiff.blob_data(self.repo, entry.sha)
        except (ValueError, gitdiff.GitError) as exc:  # an object the repository lacks (a partial clone)
            raise UnreadableError(f"unreadable at {sha[:12]}: {str(exc).splitlines()[0][:120]}") from None
        if b"\0" in data[:_BINARY_PROBE_BYTES]:
            raise UnreadableError(f"binary at {sha[:12]}")
        return data

    def branch_changes(self) -> list[BranchChange]:
        """The host functions whose branch tests changed (changed_branches.py): for a file no rule gave rows."""
        if users_only(self.path) or self.read is None:
            return []
        return self.read.branch_changes()

    def _note(self, name: str, detail: str, before: str | None = None) -> Finding:
        after = self.path if before else None
        return Finding(FindingKind.NOTE, self.path, name, before=before, after=after, detail=detail)
