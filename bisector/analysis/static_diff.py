"""Static table diff of a commit against its parent, in every changed file.

Python modules (literal tables, constants, Triton autotune / heuristics, the functions that read them),
JSON / YAML / TOML / CSV tuning files, C / C++ / CUDA sources, and CMake files (their GPU targets and kernel options,
cmake_targets.py). A file that cannot be analysed in one version
(syntax error, binary, too large) gives a note instead of rows.

A file added or removed whole is new (or dropped) code, not a change of the dispatch inside it: its entries are
not rows (the callers or includes that start or stop using it change too, and those files are compared); it is
named in a note instead, grouped by directory when there are many. Tuning files by their path (file_roles), and
sources whose head says a tuning run generated them (generated_tuning.py), are the exception: a tuning file added or
removed is new or dropped tuning, so its entries are rows.
"""

from __future__ import annotations

import gc
import os
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import git

from bisector.analysis import gitdiff
from bisector.analysis.arch_targets import arch_target_rows
from bisector.analysis.autotune_pruners import with_pruner_rows
from bisector.analysis.changed_branches import (
    BranchChange,
    last_resort_rows,
    native_branch_changes,
    python_branch_changes,
)
from bisector.analysis.chosen_literals import with_literal_rows
from bisector.analysis.cmake_targets import cmake_target_rows, is_cmake_path
from bisector.analysis.config_builders import with_builder_rows
from bisector.analysis.config_choosers import with_chooser_rows
from bisector.analysis.cython_source import CYTHON_SUFFIXES, python_source_of_cython
from bisector.analysis.file_roles import (
    is_benchmark_source,
    is_test_path,
    is_tooling_config,
    is_tuning_path,
    users_only,
)
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.generated_tuning import generated_tuning_paths
from bisector.analysis.imported_flags import imported_flag_rows
from bisector.analysis.launch_feeds import feed_rows
from bisector.analysis.native import NATIVE_SUFFIXES, diff_native, scan_native
from bisector.analysis.native_choosers import with_native_chooser_rows
from bisector.analysis.native_switches import switched_branch_rows
from bisector.analysis.option_defaults import option_default_rows
from bisector.analysis.preference_order import with_order_rows
from bisector.analysis.python_tables import ParsedModule, diff_python, parse_module, scan_pair
from bisector.analysis.rust_scan import RustSource, scan_rust
from bisector.analysis.rust_source import RUST_SUFFIXES, rust_branch_changes, rust_rows
from bisector.analysis.tile_assignments import with_tile_rows
from bisector.analysis.toggle_arguments import with_toggle_rows
from bisector.analysis.tuning_files import (
    TUNING_SUFFIXES,
    TuningFileError,
    TuningTree,
    diff_large_yaml_file,
    diff_tuning_file,
    load_tuning_file,
)
from bisector.analysis.unreached import Versions, without_unreached
from bisector.analysis.whole_files import whole_file_notes

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_ROWS_PER_FILE = 400
_BINARY_PROBE_BYTES = 8000  # git's own heuristic: a NUL byte in the first 8000 bytes means binary
PYTHON_SUFFIXES = (".py", ".pyi")
T = TypeVar("T")


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
    def from_findings(cls, findings: Sequence[Finding], repo: str = "") -> StaticDiff | None:
        summary = next((f for f in findings if f.kind is FindingKind.STATIC_SUMMARY), None)
        if summary is None:
            return None
        rows = tuple(f for f in findings if f.kind.is_static)
        count = summary.detail.removeprefix("files=")
        files = tuple(dict.fromkeys(f.file for f in rows))
        return cls(repo, summary.key, summary.before, rows, files, int(count) if count.isdigit() else len(files))

    @classmethod
    def from_json(cls, data: dict[str, object]) -> StaticDiff:
        raw_findings = data.get("findings")
        raw_files = data.get("files")
        files = tuple(str(f) for f in raw_files) if isinstance(raw_files, list) else ()
        parent = data.get("parent")
        return cls(
            repo=str(data.get("repo") or ""),
            sha=str(data["sha"]),
            parent=None if parent is None else str(parent),
            findings=tuple(Finding.from_json(f) for f in raw_findings if isinstance(f, dict))
            if isinstance(raw_findings, list)
            else (),
            files=files,
            file_count=count if isinstance(count := data.get("file_count"), int) and count != len(files) else None,
        )


def static_diff(
    repo_path: str | os.PathLike[str],
    sha: str,
    parent: str | None = None,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_rows_per_file: int = MAX_ROWS_PER_FILE,
) -> StaticDiff:
    """Diff the tables of commit sha (any revision) against parent (default: its first parent)."""
    collecting = gc.isenabled()
    gc.disable()  # the parsed modules stay alive to the end (unreached.py) and make no cycles: collections only cost
    try:
        return _diff_commit(repo_path, sha, parent, max_file_bytes, max_rows_per_file)
    finally:  # once the parsed modules are freed: a collection right after the diff would walk all their nodes
        if collecting:
            gc.enable()


def _diff_commit(
    repo_path: str | os.PathLike[str], sha: str, parent: str | None, max_file_bytes: int, max_rows_per_file: int
) -> StaticDiff:
    repo = gitdiff.open_repo(repo_path)
    try:
        commit = gitdiff.resolve_commit(repo, sha)
        base = gitdiff.resolve_commit(repo, parent) if parent else gitdiff.first_parent(repo, commit)
        changes = gitdiff.changed_files(repo, base, commit)
        whole = [c for c in changes if _added_or_removed_whole(c)]
        tuned = generated_tuning_paths(repo, base, commit, [c for c in whole if _language(c.path) == "native"])
        whole = [c for c in whole if c.path not in tuned]  # tuning results a script wrote: rows, as a tuning file's
        readable = [c for c in changes if _language(c.path) is not None and c not in whole]
        inits = {c.path: f"{posixpath.dirname(c.path)}/__init__.py" for c in readable if _in_directory_python(c)}
        blobs = {
            base: gitdiff.blob_entries(repo, base, [c.old_path for c in readable if c.old_path]) if base else {},
            commit: gitdiff.blob_entries(
                repo, commit, [c.new_path for c in readable if c.new_path] + [*inits.values()]
            ),
        }
        scripts = frozenset(path for path, init in inits.items() if init not in blobs[commit])
        native = [c for c in readable if _language(c.path) in ("native", "rust")]
        hunks = gitdiff.hunks_of(repo, base, commit, native) if native else {}
        findings: list[Finding] = []
        modules: dict[str, Versions] = {}  # the changed Python modules, for what their rows reach (unreached.py)
        analyses = [_FileAnalysis(repo, base, commit, c, max_file_bytes, blobs, hunks.get(c, [])) for c in readable]
        for analysis in analyses:
            findings.extend(_capped(analysis.findings(), analysis.path, max_rows_per_file))
            if analysis.modules is not None:
                modules[analysis.path] = analysis.modules
        findings.extend(_feed_rows(findings, modules))
        findings = without_unreached(findings, modules, scripts) + imported_flag_rows(modules)
        with_rows = {row.file for row in findings if row.kind.is_dispatch_relevant}
        findings.extend(last_resort_rows([c for a in analyses if a.path not in with_rows for c in a.branch_changes()]))
        findings.extend(whole_file_notes(whole))
    finally:
        repo.close()
    return StaticDiff(str(repo_path), commit, base, tuple(findings), tuple(change.path for change in changes))


def _feed_rows(findings: list[Finding], modules: dict[str, Versions]) -> list[Finding]:
    """launch_feeds.py's rows for the functions no dispatch-logic row names already."""
    named = {(f.file, f.name) for f in findings if f.kind is FindingKind.DISPATCH_LOGIC}
    rows = [
        row
        for path, (old, new) in modules.items()
        for row in feed_rows(path, old, new, frozenset(name for file, name in named if file == path))
    ]
    return [row for row in rows if (row.file, row.name) not in named]


def _in_directory_python(change: gitdiff.FileChange) -> bool:
    """A Python module below the top of the repository (one at the top may be a module the package installs)."""
    return _language(change.path) == "python" and "/" in change.path and change.new_path is not None


def _capped(rows: list[Finding], path: str, limit: int) -> list[Finding]:
    if len(rows) <= limit:
        return rows
    note = Finding(FindingKind.NOTE, path, "rows cut", detail=f"{len(rows) - limit} more changed rows not listed")
    return [*rows[:limit], note]


def _added_or_removed_whole(change: gitdiff.FileChange) -> bool:
    """A file the analysis would read that the commit adds or removes whole and that is no tuning file."""
    language = _language(change.path)
    if language in (None, "cmake", "json data") or (change.old_path is not None and change.new_path is not None):
        return False
    return not is_tuning_path(change.path, data=language == "tuning")


def _language(path: str) -> str | None:
    """How to read a changed file; None for files that choose no dispatch (tests, native benchmark programs, tool
    and package settings, others)."""
    lowered = path.lower()
    if is_test_path(path):
        return None
    if lowered.endswith(PYTHON_SUFFIXES):
        return "python"
    if lowered.endswith(CYTHON_SUFFIXES):
        return "cython"
    if lowered.endswith(TUNING_SUFFIXES):
        return None if is_tooling_config(path) else "tuning"
    if lowered.endswith(".dat"):
        return "json data"  # read as a tuning file when it holds JSON (a solution map), else skipped
    if lowered.endswith(RUST_SUFFIXES):
        return None if is_benchmark_source(path) else "rust"
    if lowered.endswith(NATIVE_SUFFIXES):
        return None if is_benchmark_source(path) else "native"
    return "cmake" if is_cmake_path(path) and not is_tooling_config(path) else None


class _UnreadableError(Exception):
    """One version of the file cannot be analysed; the message says why."""


class _FileAnalysis:
    def __init__(
        self,
        repo: git.Repo,
        parent: str | None,
        sha: str,
        change: gitdiff.FileChange,
        max_bytes: int,
        blobs: dict[str | None, dict[str, gitdiff.BlobEntry]],
        hunks: list[gitdiff.Hunk],
    ):
        self.repo, self.parent, self.sha, self.change, self.max_bytes = repo, parent, sha, change, max_bytes
        self.blobs = blobs  # revision -> path -> blob, listed once for all changed files
        self.hunks = hunks  # of a C / C++ / CUDA or Rust file, diffed once for all of them
        self.path = change.path
        self.modules: Versions | None = None  # a Python file's parsed versions, once diffed
        self.native_lines: tuple[list[str], list[str]] | None = None  # a C / C++ / CUDA file's, both sides there
        self.rust_sources: tuple[RustSource, RustSource] | None = None  # a Rust file's, both sides there

    def findings(self) -> list[Finding]:
        language = _language(self.path)
        if language is None:
            return []
        notes = []
        if self.change.renamed:
            notes.append(self._note("renamed", f"renamed from {self.change.old_path}", before=self.change.old_path))
        try:
            old = self._version(self.parent, self.change.old_path if self.change.status != "A" else None)
            new = self._version(self.sha, self.change.new_path)
            return notes + self._diff(language, old, new)
        except _UnreadableError as why:
            return notes if language == "json data" else [*notes, self._note("not analysed", str(why))]

    def _version(self, sha: str | None, path: str | None) -> bytes | None:
        if sha is None or path is None:
            return None
        entry = self.blobs.get(sha, {}).get(path)
        if entry is None:
            return None  # not a file at sha (absent, a submodule)
        if entry.size > self.max_bytes:
            raise _UnreadableError(f"{entry.size} bytes at {sha[:12]}, over the {self.max_bytes}-byte limit")
        try:
            data = gitdiff.blob_data(self.repo, entry.sha)
        except (ValueError, git.GitCommandError) as exc:  # an object the repository lacks (a partial clone)
            raise _UnreadableError(f"unreadable at {sha[:12]}: {str(exc).splitlines()[0][:120]}") from None
        if b"\0" in data[:_BINARY_PROBE_BYTES]:
            raise _UnreadableError(f"binary at {sha[:12]}")
        return data

    def _diff(self, language: str, old: bytes | None, new: bytes | None) -> list[Finding]:
        if language == "cython":
            try:
                parsed = self._parsed(old, new, _parse_cython)
            except _UnreadableError:  # the rewrite to Python is best effort: a file it leaves unparsable is skipped
                return []
            return self._python_rows(parsed)
        if language == "python":
            return self._python_rows(self._parsed(old, new, _parse_python))
        if language == "cmake":
            return cmake_target_rows(self.path, *self._parsed(old, new, _decode))
        if language == "tuning" and (rows := diff_large_yaml_file(self.path, old, new)) is not None:
            return rows
        if language in ("tuning", "json data"):
            loaded_as = self.path if language == "tuning" else f"{self.path}.json"
            return diff_tuning_file(self.path, *self._parsed(old, new, lambda data: _parse_tuning(loaded_as, data)))
        if language == "rust":
            was, now = self._parsed(old, new, lambda data: scan_rust(_decode(data)))
            self.rust_sources = (was, now) if was is not None and now is not None else None
            return rust_rows(self.path, was, now, self.hunks)
        before, after = self._parsed(old, new, lambda data: scan_native(_decode(data)))
        lines = (before.lines if before else [], after.lines if after else [])
        self.native_lines = lines if before and after else None
        rows = diff_native(self.path, before, after, self.hunks) + switched_branch_rows(self.path, *lines, self.hunks)
        return with_native_chooser_rows(self.path, *lines, self.hunks, rows)

    def branch_changes(self) -> list[BranchChange]:
        """The host functions whose branch tests changed (changed_branches.py): for a file no rule gave rows."""
        if users_only(self.path):
            return []
        if self.native_lines:
            return native_branch_changes(self.path, *self.native_lines, self.hunks)
        if self.rust_sources:
            return rust_branch_changes(self.path, *self.rust_sources, self.hunks)
        old, new = self.modules or (None, None)
        return python_branch_changes(self.path, old, new) if old and new else []

    def _python_rows(self, parsed: tuple[ParsedModule | None, ParsedModule | None]) -> list[Finding]:
        self.modules = parsed
        rows = diff_python(self.path, *scan_pair(*parsed))
        rows = with_chooser_rows(self.path, *parsed, with_builder_rows(self.path, *parsed, rows))
        rows = with_toggle_rows(self.path, *parsed, with_tile_rows(self.path, *parsed, rows))
        rows = with_literal_rows(self.path, *parsed, with_order_rows(self.path, *parsed, rows))
        rows = with_pruner_rows(self.path, *parsed, rows) + option_default_rows(self.path, *parsed)
        return rows + arch_target_rows(self.path, *parsed)

    def _parsed(self, old: bytes | None, new: bytes | None, parse: Callable[[bytes], T]) -> tuple[T | None, T | None]:
        results: list[T | None] = []
        for sha, data in ((self.parent, old), (self.sha, new)):
            if data is None:
                results.append(None)
                continue
            try:
                results.append(parse(data))
            except _UnreadableError as why:
                raise _UnreadableError(f"does not parse at {(sha or '')[:12]}: {why}") from None
        return results[0], results[1]

    def _note(self, name: str, detail: str, before: str | None = None) -> Finding:
        after = self.path if before else None
        return Finding(FindingKind.NOTE, self.path, name, before=before, after=after, detail=detail)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _UnreadableError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None


def _parse_python(data: bytes) -> ParsedModule:
    try:
        return parse_module(data)
    except SyntaxError as exc:
        raise _UnreadableError(f"line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:
        raise _UnreadableError(str(exc)) from None


def _parse_cython(data: bytes) -> ParsedModule:
    return _parse_python(python_source_of_cython(_decode(data)).encode("utf-8"))


def _parse_tuning(path: str, data: bytes) -> TuningTree:
    try:
        return load_tuning_file(path, _decode(data))
    except TuningFileError as exc:
        raise _UnreadableError(str(exc)) from None
