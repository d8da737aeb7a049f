"""After a bisect: explain the culprit (static table diff, traced re-runs) and minimise it (ddmin).

Runs on the coordinator; its runs go through CommitRuns, which the runner fulfils. The analysis itself lives in
bisector/analysis/.
Findings go to the store, from which every report rebuilds the explanation.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bisector.analysis import (
    Explanation,
    Finding,
    FindingKind,
    MinimizeResult,
    TraceFiles,
    Variant,
    explain,
    minimize,
    runtime_diffs,
)
from bisector.analysis.call_trace import traced_functions
from bisector.analysis.runtime import DISPATCH_TRACE_ENV
from bisector.analysis.static_diff import StaticDiff
from bisector.core.spec import BisectSpec
from bisector.core.terms import new_verdict, old_verdict
from bisector.db.store import Store
from bisector.vocab.domain import BisectRecord, SideRun, StepPurpose, StepResult, Verdict
from bisector.vocab.errors import BisectError, StateError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.paths import log_dir

MINIMIZE_KINDS = (FindingKind.MINIMAL_CHANGE, FindingKind.MINIMIZE_SUMMARY)
EXPLAIN_KINDS = tuple(kind for kind in FindingKind if kind not in MINIMIZE_KINDS)


class Notes(Protocol):
    """Where the explainer says what it did (the runner's progress observer fulfils it)."""

    def note(self, message: str) -> None: ...


def _boundary(record: BisectRecord, observer: Notes) -> tuple[str, str]:
    """(base, first bad): what the culprit is compared with, normally the last good commit.

    With --all-parents, the first commit of a merged branch is found bad against the merge's first parent;
    its own parent is older (the fork point), an ancestor of that good commit and so good too. Comparing
    with the merge's first parent would mix the culprit's change with everything main did since the fork,
    so the culprit is compared with its own first parent then.
    """
    if record.first_bad is None or record.last_good is None:
        raise StateError(f"bisect {record.id} is {record.status.value}: there is no culprit to explain")
    repo = GitRepo(record.repo)
    parents = repo.parents(record.first_bad)
    if parents and parents[0] != record.last_good and repo.is_ancestor(parents[0], record.last_good):
        observer.note(
            f"comparing {record.first_bad[:12]} with its own parent {parents[0][:12]}, an ancestor of the last "
            f"good commit {record.last_good[:12]}"
        )
        return parents[0], record.first_bad
    return record.last_good, record.first_bad


@dataclass(frozen=True)
class TracePlan:
    """Whether the traced re-runs (two more full test runs) can add something to the static diff, and what."""

    functions: tuple[str, ...]  # "path.py:Qual.name" the static diff names: wrapped and recorded
    dispatch_trace: bool  # the stack under test writes a dispatch trace (KERNELS_DISPATCH_TRACE)
    trace_kernels: bool  # the spec asks for kernel traces (--trace-kernels)

    @property
    def run(self) -> bool:
        return bool(self.functions) or self.dispatch_trace or self.trace_kernels

    @property
    def note(self) -> str:
        """The report's line on the traced re-runs: what they trace, or why they were skipped and how to ask."""
        if not self.run:
            return (
                "skipped: the static diff names no function to trace, the stack writes no dispatch trace "
                f"({DISPATCH_TRACE_ENV}) and kernel tracing is off; to run them, give `bisect start` --trace-kernels "
                "(or trace_kernels = true in bisect.toml)"
            )
        parts = []
        if self.functions:
            parts.append(f"the {len(self.functions)} functions the static diff names ({', '.join(self.functions)})")
        if self.dispatch_trace:
            parts.append("the stack's dispatch trace")
        if self.trace_kernels:
            parts.append("kernel launches (--trace-kernels)")
        return "run at last good and first bad, tracing " + "; ".join(parts)


def plan_traced_reruns(static: StaticDiff | None, spec: BisectSpec, repo: str, first_bad: str) -> TracePlan:
    """Traced re-runs run only where they can add something: the static diff named functions to trace, the stack
    writes a dispatch trace, or the spec asks for kernel traces."""
    return TracePlan(
        tuple(traced_functions(static)), writes_dispatch_trace(repo, first_bad), spec.analysis.trace_kernels
    )


def writes_dispatch_trace(repo: str, sha: str) -> bool:
    """Whether the tree at sha mentions the dispatch-trace variable (the stack can write a dispatch trace)."""
    return GitRepo(repo).mentions(sha, DISPATCH_TRACE_ENV, "*.py")


class CommitRuns(Protocol):
    """How the explainer has the bisect's test run at commits outside the search (the traced re-runs,
    minimisation's variants); the runner's SideRunner fulfils it."""

    @property
    def slots(self) -> int:
        """How many runs can go at once."""

    def run(self, runs: Sequence[SideRun]) -> list[StepResult]:
        """The results in the order of runs (an infrastructure error retried as the runner does)."""


def explain_bisect(store: Store, runner: CommitRuns, record: BisectRecord, observer: Notes) -> Explanation:
    """Static diff of the culprit against its base (the last good commit, or its own parent: _boundary), stored
    with the decision on traced re-runs before they start; then, where they can add something (TracePlan), traced
    re-runs of both, and the whole explanation stored again."""
    spec = BisectSpec.from_json(record.spec)
    base, first_bad = _boundary(record, observer)
    try:
        static = explain(record.repo, first_bad, base, env=spec.test.env)
    except BisectError as exc:
        static = None
        observer.note(f"static diff failed: {exc}")
    plan = plan_traced_reruns(static, spec, record.repo, first_bad)
    explanation = Explanation(static=static, trace_note=plan.note)
    store.replace_findings(record.id, EXPLAIN_KINDS, [f.to_json() for f in explanation.findings()])
    observer.note(f"explained {first_bad[:12]} statically; traced re-runs {plan.note}")
    if not plan.run:
        return explanation
    traces = log_dir(store.identity, record.id) / "traces"
    good_files = TraceFiles.under(
        traces, "last-good", trace_kernels=spec.analysis.trace_kernels, functions=plan.functions
    )
    bad_files = TraceFiles.under(
        traces, "first-bad", trace_kernels=spec.analysis.trace_kernels, functions=plan.functions
    )
    for files in (good_files, bad_files):
        files.reset()
    base_env = {**os.environ, **spec.test.env}
    good_run, bad_run = runner.run(
        [
            SideRun(base, StepPurpose.TRACE, good_files.env(base_env), "last-good"),
            SideRun(first_bad, StepPurpose.TRACE, bad_files.env(base_env), "first-bad"),
        ]
    )
    note = plan.note
    if (good_run.verdict, bad_run.verdict) != (Verdict.GOOD, Verdict.BAD):
        observer.note(
            f"the traced re-runs gave {good_run.verdict.value} at last good and {bad_run.verdict.value} at first bad"
        )
    if contradicted(good_run.verdict, bad_run.verdict, spec):
        warning = (
            f"the re-runs contradict the search ({good_run.verdict.value} at last good, {bad_run.verdict.value} at "
            "first bad): the test may be flaky and this culprit wrong; bisect again with --strategy noisy or --repeat"
        )
        observer.note(warning)
        note = f"{note}; warning: {warning}"
    diffs = runtime_diffs(good_files, bad_files)
    explanation = Explanation(
        static=static, dispatch=diffs.dispatch, kernels=diffs.kernels, calls=diffs.calls, trace_note=note
    )
    store.replace_findings(record.id, EXPLAIN_KINDS, [f.to_json() for f in explanation.findings()])
    return explanation


def contradicted(at_last_good: Verdict, at_first_bad: Verdict, spec: BisectSpec) -> bool:
    """Whether re-runs of the boundary's two commits went the other way than the search found them (an
    infrastructure error or a skip says nothing either way): the last good in the new state, or the first bad
    in the old one (bisector/core/terms.py: with --find-fix the old state fails)."""
    return at_last_good is new_verdict(spec) or at_first_bad is old_verdict(spec)


def minimize_bisect(store: Store, runner: CommitRuns, record: BisectRecord, observer: Notes) -> MinimizeResult:
    """ddmin over the culprit's hunks and table entries, each variant a step on the executor; stored."""
    base, first_bad = _boundary(record, observer)
    observer.note(f"minimizing {first_bad[:12]}: testing variants of {base[:12]} with subsets of its changes")

    def test(variants: Sequence[Variant]) -> list[Verdict]:
        runs = [SideRun(v.sha, StepPurpose.MINIMIZE, label=f"{len(v.units)}-units") for v in variants]
        return [r.verdict if r.verdict in (Verdict.GOOD, Verdict.BAD) else Verdict.SKIP for r in runner.run(runs)]

    result = minimize(record.repo, first_bad, test, parent=base, check_endpoints=False, batch=runner.slots)
    store.replace_findings(record.id, MINIMIZE_KINDS, [f.to_json() for f in result.to_findings()])
    observer.note(result.summary)
    return result


def stored_explanation(store: Store, bisect_id: int) -> Explanation | None:
    rows = [Finding.from_json(row) for row in store.findings(bisect_id)]
    return Explanation.from_findings(rows) if rows else None
