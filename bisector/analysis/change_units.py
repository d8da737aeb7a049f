"""A culprit commit cut into change units (hunks, single table entries, whole-file changes), and the file
contents of a variant: the parent with any subset of those units applied."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from bisector.analysis.table_spans import EntryPath, describe, entry_owners
from bisector.vocab import gitdiff
from bisector.vocab.gitdiff import FileChange, FileVersion, Hunk

_BINARY_PROBE_BYTES = 8000


class UnitKind(StrEnum):
    HUNK = "hunk"  # one zero-context hunk of a text file
    TABLE_ENTRY = "table_entry"  # the lines of one entry of a Python table literal, cut out of a hunk
    FILE = "file"  # a whole-file change: added, deleted, binary, renamed, mode changed


@dataclass(frozen=True)
class Edit:
    """Old lines [old_lo, old_hi) of the file become new lines [new_lo, new_hi) (0-based, half-open)."""

    old_lo: int
    old_hi: int
    new_lo: int
    new_hi: int
    order: int = 0  # keeps insertions at one old position in the new file's order


@dataclass(frozen=True)
class ChangeUnit:
    id: str  # "u1", "u2", ... in diff order
    path: str  # the file after the commit
    kind: UnitKind
    description: str  # "_TUNED_MMA_MIN_M[(144, 7168)]", "lines 161-169 (def threshold_for)", "added file"
    line: int | None = None  # first line in the new file (1-based), or where the removal was
    removed: tuple[str, ...] = ()  # display text of the old lines
    added: tuple[str, ...] = ()  # display text of the new lines

    @property
    def label(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where} {self.description}"


@dataclass
class _FilePlan:
    change: FileChange
    old: FileVersion | None
    new: FileVersion | None
    old_lines: list[bytes]
    new_lines: list[bytes]
    whole_unit: str | None = None  # the unit that swaps the whole file (then no line edits)
    rename_unit: str | None = None
    mode_unit: str | None = None
    edit_units: dict[str, tuple[Edit, ...]] = field(default_factory=dict)


@dataclass
class CulpritChanges:
    """The units of one commit against its parent; files_for() gives the files of any subset."""

    parent: str
    culprit: str
    units: list[ChangeUnit]
    _plans: list[_FilePlan]

    def files_for(self, selected: Collection[str]) -> dict[str, FileVersion | None]:
        """The files that differ from the parent when the selected unit ids are applied (None: removed)."""
        files: dict[str, FileVersion | None] = {}
        for plan in self._plans:
            files.update(_plan_files(plan, set(selected)))
        return files


def culprit_changes(repo: gitdiff.Repo, culprit: str, parent: str) -> CulpritChanges:
    """Cut culprit (against parent) into units: whole-file changes, renames, mode changes, and hunks, split into
    single table entries where a hunk edits a Python table literal."""
    builder = _UnitBuilder()
    plans = [builder.plan(repo, culprit, parent, change) for change in gitdiff.changed_files(repo, parent, culprit)]
    return CulpritChanges(parent, culprit, builder.units, plans)


class _UnitBuilder:
    def __init__(self) -> None:
        self.units: list[ChangeUnit] = []

    def add(
        self,
        path: str,
        kind: UnitKind,
        description: str,
        line: int | None = None,
        removed: tuple[str, ...] = (),
        added: tuple[str, ...] = (),
    ) -> str:
        unit = ChangeUnit(f"u{len(self.units) + 1}", path, kind, description, line, removed, added)
        self.units.append(unit)
        return unit.id

    def plan(self, repo: gitdiff.Repo, culprit: str, parent: str, change: FileChange) -> _FilePlan:
        old = gitdiff.file_at(repo, parent, change.old_path)
        new = gitdiff.file_at(repo, culprit, change.new_path)
        plan = _FilePlan(change, old, new, _lines(old), _lines(new))
        path = change.path
        if old is None or new is None or _binary(old) or _binary(new):
            what = "added file" if old is None else "deleted file" if new is None else "binary file"
            if change.renamed:
                what += f" (renamed from {change.old_path})"
            plan.whole_unit = self.add(path, UnitKind.FILE, what)
            return plan
        if change.renamed:
            plan.rename_unit = self.add(path, UnitKind.FILE, f"renamed from {change.old_path}")
        if old.mode != new.mode:
            plan.mode_unit = self.add(path, UnitKind.FILE, f"mode {old.mode} -> {new.mode}")
        python = path.endswith(".py")
        owners_old = entry_owners(old.data) if python else {}
        owners_new = entry_owners(new.data) if python else {}
        for hunk in gitdiff.file_hunks(repo, parent, culprit, change):
            for kind, description, edit in _split(hunk, owners_old, owners_new):
                unit_id = self.add(
                    path,
                    kind,
                    description,
                    line=(edit.new_lo + 1) if edit.new_hi > edit.new_lo else max(edit.new_lo, 1),
                    removed=_text(plan.old_lines[edit.old_lo : edit.old_hi]),
                    added=_text(plan.new_lines[edit.new_lo : edit.new_hi]),
                )
                plan.edit_units[unit_id] = (edit,)
        return plan


_Split = list[tuple[UnitKind, str, Edit]]


def _split(hunk: Hunk, owners_old: dict[int, EntryPath], owners_new: dict[int, EntryPath]) -> _Split:
    """One unit per table entry the hunk edits, or the whole hunk as one unit when its lines are not all
    table entries."""
    whole = [(UnitKind.HUNK, _hunk_description(hunk), Edit(hunk.old_lo, hunk.old_hi, hunk.new_lo, hunk.new_hi))]
    old_groups = _groups(range(hunk.old_lo, hunk.old_hi), owners_old)
    new_groups = _groups(range(hunk.new_lo, hunk.new_hi), owners_new)
    if old_groups is None or new_groups is None:
        return whole
    matcher = difflib.SequenceMatcher(a=[g[0] for g in old_groups], b=[g[0] for g in new_groups], autojunk=False)
    units: _Split = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for (owner, old_lo, old_hi), (_, new_lo, new_hi) in zip(old_groups[i1:i2], new_groups[j1:j2], strict=True):
                units.append((UnitKind.TABLE_ENTRY, describe(owner), Edit(old_lo, old_hi, new_lo, new_hi, len(units))))
            continue
        new_at = new_groups[j1][1] if j1 < len(new_groups) else hunk.new_hi
        for owner, old_lo, old_hi in old_groups[i1:i2]:
            edit = Edit(old_lo, old_hi, new_at, new_at, len(units))
            units.append((UnitKind.TABLE_ENTRY, f"{describe(owner)} (removed)", edit))
        old_at = old_groups[i2 - 1][2] if i2 > i1 else (old_groups[i1][1] if i1 < len(old_groups) else hunk.old_hi)
        for owner, new_lo, new_hi in new_groups[j1:j2]:
            edit = Edit(old_at, old_at, new_lo, new_hi, len(units))
            units.append((UnitKind.TABLE_ENTRY, f"{describe(owner)} (added)", edit))
    return units or whole


def _groups(lines: range, owners: dict[int, EntryPath]) -> list[tuple[EntryPath, int, int]] | None:
    """Consecutive lines with one owner as (owner, lo, hi); None if a line has no owner or an owner comes back."""
    groups: list[tuple[EntryPath, int, int]] = []
    for line in lines:
        owner = owners.get(line)
        if owner is None:
            return None
        if groups and groups[-1][0] == owner and groups[-1][2] == line:
            groups[-1] = (owner, groups[-1][1], line + 1)
        elif any(g[0] == owner for g in groups):
            return None
        else:
            groups.append((owner, line, line + 1))
    return groups


def _hunk_description(hunk: Hunk) -> str:
    if hunk.new_hi > hunk.new_lo:
        where = f"lines {hunk.new_lo + 1}-{hunk.new_hi}" if hunk.new_hi - hunk.new_lo > 1 else f"line {hunk.new_lo + 1}"
    else:
        where = f"removed old lines {hunk.old_lo + 1}-{hunk.old_hi}"
    return f"{where} ({hunk.header})" if hunk.header else where


def _plan_files(plan: _FilePlan, selected: set[str]) -> dict[str, FileVersion | None]:
    change = plan.change
    if plan.whole_unit is not None:
        files: dict[str, FileVersion | None] = {}
        if change.old_path:
            files[change.old_path] = plan.old
        if change.new_path and change.new_path != change.old_path:
            files[change.new_path] = None
        if plan.whole_unit in selected:
            if change.old_path:
                files[change.old_path] = None
            if change.new_path:
                files[change.new_path] = plan.new
        return files
    assert plan.old is not None
    assert plan.new is not None
    edits = sorted(
        (e for unit_id, unit_edits in plan.edit_units.items() if unit_id in selected for e in unit_edits),
        key=lambda e: (e.old_lo, e.order),
    )
    content: list[bytes] = []
    position = 0
    for edit in edits:
        content.extend(plan.old_lines[position : edit.old_lo])
        content.extend(plan.new_lines[edit.new_lo : edit.new_hi])
        position = max(position, edit.old_hi)
    content.extend(plan.old_lines[position:])
    mode = plan.new.mode if plan.mode_unit in selected else plan.old.mode
    version = FileVersion(mode, b"".join(content))
    assert change.old_path is not None
    assert change.new_path is not None
    if plan.rename_unit in selected:
        return {change.old_path: None, change.new_path: version}
    return {change.old_path: version, **({change.new_path: None} if change.renamed else {})}


def _lines(version: FileVersion | None) -> list[bytes]:
    """Lines as git counts them (split after each \\n, the last one maybe without)."""
    if version is None:
        return []
    parts = version.data.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _binary(version: FileVersion) -> bool:
    return version.mode == "120000" or b"\0" in version.data[:_BINARY_PROBE_BYTES]


def _text(lines: Iterable[bytes]) -> tuple[str, ...]:
    return tuple(line.decode("utf-8", errors="replace").rstrip("\r\n") for line in lines)
