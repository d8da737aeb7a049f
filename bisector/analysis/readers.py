"""The readers of a changed file, one per language or format, and READERS: the declared table that picks one.

A Reader claims the paths of its language (by suffix or name) and turns a file's two versions into rows; READERS
names each with what it finds. The first reader in the table that claims a path reads it; a claimed path that it
skips (a tool's settings, a benchmark program) is read by none, and neither is a test. explain() takes the
table as an argument, so a reader can be plugged in (tests/analysis/test_analysis_readers.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from bisector.analysis.arch_targets import arch_target_rows
from bisector.analysis.changed_branches import BranchChange, native_branch_changes, python_branch_changes
from bisector.analysis.chosen_literals import with_literal_rows
from bisector.analysis.cmake_targets import cmake_target_rows, is_cmake_path
from bisector.analysis.config_builders import with_builder_rows
from bisector.analysis.file_roles import is_benchmark_source, is_test_path, is_tooling_config, is_tuning_path
from bisector.analysis.findings import Finding
from bisector.analysis.kernel_code import kernel_code_rows
from bisector.analysis.native import NATIVE_SUFFIXES, diff_native, scan_native
from bisector.analysis.native_choosers import with_native_chooser_rows
from bisector.analysis.python_tables import ParsedModule, diff_python, parse_module, scan_pair
from bisector.analysis.rules import produce, refine, stamped
from bisector.analysis.rust_source import RUST_SUFFIXES, rust_branch_changes, scan_rust
from bisector.analysis.toggle_arguments import with_toggle_rows
from bisector.analysis.tuning_files import (
    TUNING_SUFFIXES,
    TuningFileError,
    diff_large_yaml_file,
    diff_tuning_file,
    load_tuning_file,
)
from bisector.analysis.values import Node
from bisector.vocab.gitdiff import Hunk

PYTHON_SUFFIXES = (".py", ".pyi")
T = TypeVar("T")


class UnreadableError(Exception):
    """One version of the file cannot be analysed; the message says why."""


@dataclass(frozen=True)
class FileVersions:
    """One changed file as a reader gets it: its bytes before and after (None: absent on that side)."""

    path: str
    old: bytes | None
    new: bytes | None
    revisions: tuple[str | None, str]  # (base, commit): named when a version does not parse
    hunks: Sequence[Hunk] = ()  # the diff's hunks, for a reader with needs_hunks

    def parsed(self, parse: Callable[[bytes], T]) -> tuple[T | None, T | None]:
        """Both versions parsed; UnreadableError (naming the revision) when one does not parse."""
        results: list[T | None] = []
        for revision, data in zip(self.revisions, (self.old, self.new), strict=True):
            if data is None:
                results.append(None)
                continue
            try:
                results.append(parse(data))
            except UnreadableError as why:
                raise UnreadableError(f"does not parse at {(revision or '')[:12]}: {why}") from None
        return results[0], results[1]


def _no_branch_changes() -> list[BranchChange]:
    return []


@dataclass(frozen=True)
class FileRows:
    rows: list[Finding]
    branch_changes: Callable[[], list[BranchChange]] = field(default=_no_branch_changes)  # for rows of last resort


def _never(path: str) -> bool:
    return False


def _tuning_source(path: str) -> bool:
    return is_tuning_path(path, data=False)


@dataclass(frozen=True)
class Reader:
    name: str
    finds: str  # what its rows are, in words
    claims: Callable[[str], bool]  # the paths of its language or format
    read: Callable[[FileVersions], FileRows]  # raises UnreadableError for a version it cannot analyse
    skips: Callable[[str], bool] = _never  # claimed paths that choose no dispatch: read by no reader
    rows_when_whole: Callable[[str], bool] = _tuning_source  # a file added or removed whole still gives rows
    needs_hunks: bool = False
    quiet_when_unreadable: bool = False  # a version it cannot analyse gives no note (the suffix was only a guess)
    generated_tuning: bool = False  # a source added whole whose head says a tuning run wrote it gives rows


def reader_for(path: str, readers: Sequence[Reader]) -> Reader | None:
    """The reader of a changed file; None for tests and for files no reader claims, or that the claiming one skips."""
    if is_test_path(path):
        return None
    reader = next((reader for reader in readers if reader.claims(path)), None)
    return None if reader is None or reader.skips(path) else reader


def _suffix(suffixes: tuple[str, ...]) -> Callable[[str], bool]:
    return lambda path: path.lower().endswith(suffixes)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None


def _parse_python(data: bytes) -> ParsedModule:
    try:
        return parse_module(data)
    except SyntaxError as exc:
        raise UnreadableError(f"line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:
        raise UnreadableError(str(exc)) from None


_PYTHON_PASSES: tuple[tuple[str, Callable[..., list[Finding]]], ...] = (
    ("config_builders", with_builder_rows),
    ("toggle_arguments", with_toggle_rows),
    ("chosen_literals", with_literal_rows),
)  # in this order: a later pass leaves out the functions an earlier one named


def _read_python(file: FileVersions) -> FileRows:
    path, (old, new) = file.path, file.parsed(_parse_python)
    rows = diff_python(path, *scan_pair(old, new))
    for name, rule in _PYTHON_PASSES:
        rows = refine(name, rows, rule, path, old, new)
    rows += produce("arch_targets", arch_target_rows, path, old, new)
    rows += kernel_code_rows(path, old, new)
    changes = (lambda: python_branch_changes(path, old, new)) if old and new else _no_branch_changes
    return FileRows(rows, changes)


def _tuning_reader(loaded_as: Callable[[str], str]) -> Callable[[FileVersions], FileRows]:
    def read(file: FileVersions) -> FileRows:
        def parse(data: bytes) -> Node:
            try:
                return load_tuning_file(loaded_as(file.path), _decode(data))
            except TuningFileError as exc:
                raise UnreadableError(str(exc)) from None

        return FileRows(produce("tuning_files", diff_tuning_file, file.path, *file.parsed(parse)))

    return read


def _read_tuning(file: FileVersions) -> FileRows:
    rows = diff_large_yaml_file(file.path, file.old, file.new)
    return FileRows(stamped("tuning_files", rows)) if rows is not None else _tuning_reader(lambda path: path)(file)


def _read_rust(file: FileVersions) -> FileRows:
    was, now = file.parsed(lambda data: scan_rust(_decode(data)))
    if was is None or now is None:
        return FileRows([])
    return FileRows([], branch_changes=lambda: rust_branch_changes(file.path, was, now, file.hunks))


def _read_native(file: FileVersions) -> FileRows:
    before, after = file.parsed(lambda data: scan_native(_decode(data)))
    lines = (before.lines if before else [], after.lines if after else [])
    rows = diff_native(file.path, before, after, file.hunks)
    rows = refine("native_choosers", rows, with_native_chooser_rows, file.path, *lines, file.hunks)
    if before is None or after is None:
        return FileRows(rows)
    return FileRows(rows, branch_changes=lambda: native_branch_changes(file.path, *lines, file.hunks))


def _read_cmake(file: FileVersions) -> FileRows:
    return FileRows(produce("cmake_targets", cmake_target_rows, file.path, *file.parsed(_decode)))


def _always(path: str) -> bool:
    return True


READERS: tuple[Reader, ...] = (
    Reader(
        "python", "literal tables, constants, Triton autotune / heuristics, their readers, launches and gates",
        _suffix(PYTHON_SUFFIXES), _read_python,
    ),
    Reader(
        "tuning", "each changed leaf of a JSON / YAML / TOML tuning file", _suffix(TUNING_SUFFIXES),
        _read_tuning, skips=is_tooling_config, rows_when_whole=lambda path: is_tuning_path(path, data=True),
    ),
    Reader(
        "json data", "a .dat solution map that holds JSON, as a tuning file", _suffix((".dat",)),
        _tuning_reader(lambda path: f"{path}.json"), rows_when_whole=_always, quiet_when_unreadable=True,
    ),
    Reader(
        "rust", "branch tests and match arms of functions, as rows of last resort", _suffix(RUST_SUFFIXES), _read_rust,
        skips=is_benchmark_source, needs_hunks=True,
    ),
    Reader(
        "native", "C / C++ / CUDA / HIP arrays, thresholds, #defines, batch-size conditions, switches, choosers",
        _suffix(NATIVE_SUFFIXES), _read_native, skips=is_benchmark_source, needs_hunks=True, generated_tuning=True,
    ),
    Reader(
        "cmake", "GPU arch target lists and kernel-gating option defaults", is_cmake_path, _read_cmake,
        skips=is_tooling_config, rows_when_whole=_always,
    ),
)  # fmt: skip
