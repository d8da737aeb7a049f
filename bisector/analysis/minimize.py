"""Culprit minimisation: which of a culprit commit's change units are needed to reproduce the bad verdict.

Each tested subset is a variant commit (the parent's tree with the subset applied, on no branch), so any
step runner that tests a SHA can test it; the runner is the caller's VariantTester.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from bisector.analysis import gitdiff
from bisector.analysis.change_units import ChangeUnit, CulpritChanges, UnitKind, culprit_changes
from bisector.analysis.ddmin import Subset, ddmin
from bisector.analysis.findings import Finding, FindingKind
from bisector.domain import Verdict
from bisector.errors import RepoError
from bisector.gitrepo import GitRepo
from workers.process import run_shell


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
    minimal: tuple[ChangeUnit, ...]  # the smallest failing set found (empty unless status is MINIMAL)
    test_count: int  # variants tested
    minimal_sha: str | None = None  # the variant with exactly the minimal units
    units: tuple[ChangeUnit, ...] = ()  # every unit (not kept in the store)
    trials: tuple[Trial, ...] = ()  # every test (not kept in the store)

    @property
    def summary(self) -> str:
        tests = f"{self.test_count} test{'s' if self.test_count != 1 else ''}"
        if self.status is MinimizeStatus.NOT_REPRODUCED:
            return f"the culprit {self.culprit[:12]} did not reproduce the bad verdict; not minimised ({tests})"
        if self.status is MinimizeStatus.PARENT_BAD:
            return f"the parent {self.parent[:12]} already tests bad; not minimised ({tests})"
        unit_word = "unit" if self.unit_count == 1 else "units"
        return f"{len(self.minimal)} of {self.unit_count} change {unit_word} reproduce the bad verdict ({tests})"

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
        for unit in self.minimal:
            rows.append(
                Finding(
                    FindingKind.MINIMAL_CHANGE,
                    file=unit.path,
                    name=unit.description,
                    key=unit.id,
                    before="\n".join(unit.removed) if unit.removed else None,
                    after="\n".join(unit.added) if unit.added else None,
                    line=unit.line,
                    detail=unit.kind.value,
                )
            )
        return rows

    @classmethod
    def from_findings(cls, findings: Sequence[Finding]) -> MinimizeResult | None:
        """Rebuild what a report needs (the summary and the minimal units) from stored rows."""
        summary = next((f for f in findings if f.kind is FindingKind.MINIMIZE_SUMMARY), None)
        if summary is None:
            return None
        fields = dict(part.split("=", 1) for part in summary.detail.split() if "=" in part)
        minimal = tuple(
            ChangeUnit(
                id=f.key,
                path=f.file,
                kind=UnitKind(f.detail) if f.detail in UnitKind._value2member_map_ else UnitKind.HUNK,
                description=f.name,
                line=f.line,
                removed=tuple(f.before.split("\n")) if f.before is not None else (),
                added=tuple(f.after.split("\n")) if f.after is not None else (),
            )
            for f in findings
            if f.kind is FindingKind.MINIMAL_CHANGE
        )
        tests = fields.get("tests", "0")
        return cls(
            culprit=summary.key,
            parent=fields.get("parent", ""),
            status=MinimizeStatus(summary.name),
            unit_count=int(summary.before) if summary.before and summary.before.isdigit() else len(minimal),
            minimal=minimal,
            test_count=int(tests) if tests.isdigit() else 0,
            minimal_sha=fields.get("variant") or None,
        )


def minimize(
    repo_path: str | os.PathLike[str],
    culprit: str,
    test: VariantTester,
    *,
    parent: str | None = None,
    batch: int = 1,
    check_endpoints: bool = True,
) -> MinimizeResult:
    """ddmin over the culprit's change units. check_endpoints first tests the culprit (must be bad) and its
    parent (must not be); a bisect that just found them can skip that. batch: variants per test call."""
    repo = gitdiff.open_repo(repo_path)
    try:
        sha = gitdiff.resolve_commit(repo, culprit)
        base = gitdiff.resolve_commit(repo, parent) if parent else gitdiff.first_parent(repo, sha)
        if base is None:
            raise RepoError(f"{sha[:12]} is a root commit: there is no parent to apply its changes to")
        changes = culprit_changes(repo, sha, base)
        runner = _VariantRunner(repo_path, changes, test, gitdiff.commit_date(repo, sha))
        units = tuple(changes.units)
        everything = frozenset(range(len(units)))
        status = MinimizeStatus.MINIMAL
        if check_endpoints:
            full, empty = runner.verdicts([everything, frozenset()])
            if full is not Verdict.BAD:
                status = MinimizeStatus.NOT_REPRODUCED
            elif empty is Verdict.BAD:
                status = MinimizeStatus.PARENT_BAD
        kept = ddmin(len(units), runner.fails, batch=batch) if status is MinimizeStatus.MINIMAL else frozenset()
        return MinimizeResult(
            culprit=sha,
            parent=base,
            status=status,
            unit_count=len(units),
            minimal=tuple(units[i] for i in sorted(kept)),
            test_count=len(runner.trials),
            minimal_sha=runner.variant(kept).sha if status is MinimizeStatus.MINIMAL else None,
            units=units,
            trials=tuple(runner.trials),
        )
    finally:
        repo.close()


class _VariantRunner:
    """Builds variant commits for subsets of unit indexes, tests them, and keeps every trial."""

    def __init__(self, repo_path: str | os.PathLike[str], changes: CulpritChanges, test: VariantTester, date: str):
        self.repo_path, self.changes, self.test, self.date = repo_path, changes, test, date
        self.trials: list[Trial] = []
        self._shas: dict[Subset, str] = {}

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
        variants = [self.variant(subset) for subset in subsets]
        verdicts = list(self.test(variants))
        if len(verdicts) != len(variants):
            raise ValueError(f"the variant tester returned {len(verdicts)} verdicts for {len(variants)} variants")
        self.trials.extend(Trial(v.units, v.sha, verdict) for v, verdict in zip(variants, verdicts, strict=True))
        return verdicts

    def fails(self, subsets: Sequence[Subset]) -> list[bool]:
        return [verdict is Verdict.BAD for verdict in self.verdicts(subsets)]


class ShellVariantTester:
    """Tests variants one after another in one scratch worktree with a shell command (bash -c, cwd the
    worktree): exit 0 good, 125 skip, 1-127 bad; a timeout or a signal is an error."""

    def __init__(
        self,
        repo_path: str | os.PathLike[str],
        worktree: Path,
        command: str,
        *,
        timeout_s: float = 600.0,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.repo = GitRepo(os.fspath(repo_path))
        self.worktree, self.command, self.timeout_s = worktree, command, timeout_s
        self.env = dict(os.environ if env is None else env)
        self.log_path = log_path or worktree.with_name(worktree.name + ".log")

    def __call__(self, variants: Sequence[Variant]) -> list[Verdict]:
        return [self.test_one(variant) for variant in variants]

    def test_one(self, variant: Variant) -> Verdict:
        self.repo.ensure_worktree(self.worktree, variant.sha)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"# variant {variant.sha} units {' '.join(variant.units) or '(none)'}\n".encode())
            log.flush()
            env = {**self.env, "BISECT_SHA": variant.sha}
            outcome = run_shell(self.command, self.worktree, env, log, self.timeout_s)
        if outcome.timed_out or outcome.exit_code < 0 or outcome.exit_code > 127:
            return Verdict.ERROR
        if outcome.exit_code == 0:
            return Verdict.GOOD
        return Verdict.SKIP if outcome.exit_code == 125 else Verdict.BAD
