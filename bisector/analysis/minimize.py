"""Culprit minimisation: which of a culprit commit's change units are needed to reproduce the bad verdict.

Each tested subset is a variant commit (the parent's tree with the subset applied, on no branch), so any
step runner that tests a SHA can test it; the runner is the caller's VariantTester.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from bisector.analysis.change_units import ChangeUnit, CulpritChanges, UnitKind, culprit_changes
from bisector.analysis.ddmin import Subset, ddmin
from bisector.analysis.findings import Finding, FindingKind
from bisector.vocab import gitdiff
from bisector.vocab.domain import Verdict
from bisector.vocab.errors import RepoError


@dataclass(frozen=True)
class Variant:
    sha: str  # a commit: parent + the units (the parent itself when none, the culprit when all)
    units: tuple[str, ...]  # ids of the applied change units


class VariantTester(Protocol):
    """Tests variants (possibly in parallel) and returns one verdict each, in order. BAD means reproduced."""

    def __call__(self, variants: Sequence[Variant]) -> Sequence[Verdict]: ...


def one_at_a_time(test: Callable[[Variant], Verdict]) -> VariantTester:
    """A VariantTester from a function that tests one variant."""

    def tester(variants: Sequence[Variant]) -> Sequence[Verdict]:
        return [test(variant) for variant in variants]

    return tester


class MinimizeStatus(StrEnum):
    MINIMAL = "minimal"  # a 1-minimal set of units reproduces the bad verdict
    NOT_REPRODUCED = "not_reproduced"  # the culprit itself did not test bad this time
    PARENT_BAD = "parent_bad"  # the parent already tests bad: nothing of the culprit is needed


@dataclass(frozen=True)
class Trial:
    units: tuple[str, ...]
    sha: str
    verdict: Verdict


@dataclass(frozen=True)
class MinimizeResult:
    culprit: str
    parent: str
    status: MinimizeStatus
    unit_count: int  # how many change units the culprit has
    # Disjoint 1-minimal failing sets: the first found by ddmin over all units, each next one over the units
    # left once the earlier sets are taken out, for as long as those still fail. Several sets mean
    # independent causes (each enough on its own); empty unless status is MINIMAL.
    groups: tuple[tuple[ChangeUnit, ...], ...]
    test_count: int  # variants tested
    minimal_sha: str | None = None  # the variant with exactly the first set's units
    units: tuple[ChangeUnit, ...] = ()  # every unit (not kept in the store)
    trials: tuple[Trial, ...] = ()  # every test (not kept in the store)

    @property
    def minimal(self) -> tuple[ChangeUnit, ...]:
        """Every unit that matters: the union of the groups, in diff order."""
        return tuple(sorted((u for group in self.groups for u in group), key=_unit_order))

    @property
    def summary(self) -> str:
        tests = f"{self.test_count} test{'s' if self.test_count != 1 else ''}"
        if self.status is MinimizeStatus.NOT_REPRODUCED:
            return f"the culprit {self.culprit[:12]} did not reproduce the bad verdict; not minimised ({tests})"
        if self.status is MinimizeStatus.PARENT_BAD:
            return f"the parent {self.parent[:12]} already tests bad; not minimised ({tests})"
        unit_word = "unit" if self.unit_count == 1 else "units"
        head = f"{len(self.minimal)} of {self.unit_count} change {unit_word} reproduce the bad verdict"
        if len(self.groups) > 1:
            each = "each alone" if all(len(g) == 1 for g in self.groups) else "each set alone"
            head += f": {len(self.groups)} independent causes, {each} enough"
        elif len(self.minimal) > 1:
            head += " only together"
        return f"{head} ({tests})"

    def to_findings(self) -> list[Finding]:
        rows = [
            Finding(
                FindingKind.MINIMIZE_SUMMARY,
                file="",
                name=self.status.value,
                key=self.culprit,
                before=str(self.unit_count),
                after=str(len(self.minimal)),
                detail=f"parent={self.parent} tests={self.test_count} variant={self.minimal_sha or ''}",
            )
        ]
        for index, group in enumerate(self.groups, start=1):
            for unit in group:
                rows.append(
                    Finding(
                        FindingKind.MINIMAL_CHANGE,
                        file=unit.path,
                        name=unit.description,
                        key=unit.id,
                        before="\n".join(unit.removed) if unit.removed else None,
                        after="\n".join(unit.added) if unit.added else None,
                        line=unit.line,
                        detail=f"{unit.kind.value} group={index}",
                    )
                )
        return rows

    @classmethod
    def from_findings(cls, findings: Sequence[Finding]) -> MinimizeResult | None:
        """Rebuild what a report needs (the summary and the groups of units) from stored rows."""
        summary = next((f for f in findings if f.kind is FindingKind.MINIMIZE_SUMMARY), None)
        if summary is None:
            return None
        fields = _fields(summary.detail)
        groups: dict[str, list[ChangeUnit]] = {}
        for row in findings:
            if row.kind is not FindingKind.MINIMAL_CHANGE:
                continue
            kind = row.detail.split()[0] if row.detail else ""
            groups.setdefault(_fields(row.detail).get("group", "1"), []).append(
                ChangeUnit(
                    id=row.key,
                    path=row.file,
                    kind=UnitKind(kind) if kind in UnitKind._value2member_map_ else UnitKind.HUNK,
                    description=row.name,
                    line=row.line,
                    removed=tuple(row.before.split("\n")) if row.before is not None else (),
                    added=tuple(row.after.split("\n")) if row.after is not None else (),
                )
            )
        tests = fields.get("tests", "0")
        total = summary.before or ""
        return cls(
            culprit=summary.key,
            parent=fields.get("parent", ""),
            status=MinimizeStatus(summary.name),
            unit_count=int(total) if total.isdigit() else sum(len(g) for g in groups.values()),
            groups=tuple(tuple(groups[key]) for key in sorted(groups, key=lambda k: int(k) if k.isdigit() else 0)),
            test_count=int(tests) if tests.isdigit() else 0,
            minimal_sha=fields.get("variant") or None,
        )


def _fields(detail: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in detail.split() if "=" in part)


def _unit_order(unit: ChangeUnit) -> tuple[int, str]:
    number = unit.id.removeprefix("u")
    return (int(number) if number.isdigit() else 0, unit.id)


MAX_CAUSES = 8  # independent minimal sets looked for after the first


def minimize(
    repo_path: str | os.PathLike[str],
    culprit: str,
    test: VariantTester,
    *,
    parent: str | None = None,
    batch: int = 1,
    check_endpoints: bool = True,
) -> MinimizeResult:
    """ddmin over the culprit's change units, then again over what is left for as long as that still fails
    (up to MAX_CAUSES sets), so that independent causes are all named. check_endpoints first tests the
    culprit (must be bad) and its parent (must not be); a bisect that just found them can skip that.
    batch: how many variants one call of the tester gets (to run them in parallel)."""
    repo = gitdiff.open_repo(repo_path)
    try:
        sha = gitdiff.resolve_commit(repo, culprit)
        base = gitdiff.resolve_commit(repo, parent) if parent else gitdiff.first_parent(repo, sha)
        if base is None:
            raise RepoError(f"{sha[:12]} is a root commit: there is no parent to apply its changes to")
        changes = culprit_changes(repo, sha, base)
        date = gitdiff.commit_date(repo, sha)
    finally:
        repo.close()
    runner = _VariantRunner(repo_path, changes, test, date)
    units = tuple(changes.units)
    status = MinimizeStatus.MINIMAL
    if check_endpoints:
        full, empty = runner.verdicts([frozenset(range(len(units))), frozenset()])
        if full is not Verdict.BAD:
            status = MinimizeStatus.NOT_REPRODUCED
        elif empty is Verdict.BAD:
            status = MinimizeStatus.PARENT_BAD
    groups = _causes(runner, len(units), batch) if status is MinimizeStatus.MINIMAL else []
    return MinimizeResult(
        culprit=sha,
        parent=base,
        status=status,
        unit_count=len(units),
        groups=tuple(tuple(units[i] for i in sorted(group)) for group in groups),
        test_count=len(runner.trials),
        minimal_sha=runner.variant(groups[0]).sha if groups else None,
        units=units,
        trials=tuple(runner.trials),
    )


def _causes(runner: _VariantRunner, count: int, batch: int) -> list[Subset]:
    """Disjoint minimal failing sets; the whole set is known to fail."""
    groups: list[Subset] = []
    left = list(range(count))
    while left and len(groups) < MAX_CAUSES:
        if groups and not runner.fails([frozenset(left)])[0]:
            break
        items = list(left)

        def fails(subsets: Sequence[Subset], items: list[int] = items) -> list[bool]:
            return runner.fails([frozenset(items[i] for i in subset) for subset in subsets])

        group = frozenset(items[i] for i in ddmin(len(items), fails, batch=batch))
        groups.append(group)
        left = [i for i in left if i not in group]
    return groups


class _VariantRunner:
    """Builds variant commits for subsets of unit indexes, tests them once each, and keeps every trial."""

    def __init__(self, repo_path: str | os.PathLike[str], changes: CulpritChanges, test: VariantTester, date: str):
        self.repo_path, self.changes, self.test, self.date = repo_path, changes, test, date
        self.trials: list[Trial] = []
        self._shas: dict[Subset, str] = {}
        self._verdicts: dict[Subset, Verdict] = {}

    def variant(self, subset: Subset) -> Variant:
        ids = tuple(self.changes.units[i].id for i in sorted(subset))
        if subset not in self._shas:
            if len(subset) == len(self.changes.units):
                self._shas[subset] = self.changes.culprit
            elif not subset:
                self._shas[subset] = self.changes.parent
            else:
                repo = gitdiff.open_repo(self.repo_path)
                try:
                    message = f"gpu-bisect variant of {self.changes.culprit[:12]}: {' '.join(ids)}"
                    files = self.changes.files_for(ids)
                    self._shas[subset] = gitdiff.write_variant(repo, self.changes.parent, files, message, self.date)
                finally:
                    repo.close()
        return Variant(self._shas[subset], ids)

    def verdicts(self, subsets: Sequence[Subset]) -> list[Verdict]:
        todo = [subset for subset in dict.fromkeys(subsets) if subset not in self._verdicts]
        if todo:
            variants = [self.variant(subset) for subset in todo]
            verdicts = list(self.test(variants))
            if len(verdicts) != len(variants):
                raise ValueError(f"the variant tester returned {len(verdicts)} verdicts for {len(variants)} variants")
            self.trials.extend(Trial(v.units, v.sha, verdict) for v, verdict in zip(variants, verdicts, strict=True))
            self._verdicts.update(zip(todo, verdicts, strict=True))
        return [self._verdicts[subset] for subset in subsets]

    def fails(self, subsets: Sequence[Subset]) -> list[bool]:
        return [verdict is Verdict.BAD for verdict in self.verdicts(subsets)]
