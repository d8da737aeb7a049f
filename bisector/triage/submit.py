"""Bisects for the regressions of a triage: one per regressed test (or metric), started through the core.

Grouping: failures of one triage share its range, so they group by test: the parametrized cases of one
test function (`test_gemm[8]`, `test_gemm[16]`) become one bisect that runs the function (all its cases);
a collection error becomes one bisect that runs its module or directory ({test} and {file} its path).
A test becomes `--run` from a template (default `python -m pytest -q {test}`; placeholders, shell-quoted:
{test} the pytest node id without parameters, {file} its file, {name} the function, {classname} JUnit's
classname); the exit code decides, as with `git bisect run`. A metric becomes `--run` from the metrics
file's "run" (else `--metric-run-template` with {metric}), `--metric` from its "pattern" (else
`NAME: <number>` / `NAME=<number>` in the output) and `--expect` from its threshold and direction.
Infrastructure and flaky failures are never bisected; nor are regressions whose test is absent or skipped
in the good run (the good endpoint could not pass). The operator's infrastructure signatures
(`--signatures`) become each bisect's `--infra-pattern`s, so its steps retry them too.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from bisector.triage.classify import Failure
from bisector.triage.model import CaseResult
from bisector.triage.triage import TriageReport
from bisector.vocab.errors import InputError
from bisector.vocab.gitrepo import GitRepo

DEFAULT_RUN_TEMPLATE = "python -m pytest -q {test}"
_PARAMS = re.compile(r"\[.*\]$")


@dataclass(frozen=True)
class BisectPlan:
    key: str  # the test's node id, or the metric's name
    failures: tuple[str, ...]  # the triaged failures it stands for
    run: str
    metric: str | None = None
    expect: str | None = None


@dataclass(frozen=True)
class NotBisected:
    test: str
    why: str


def plan_bisects(
    report: TriageReport, run_template: str = DEFAULT_RUN_TEMPLATE, metric_run_template: str | None = None
) -> tuple[list[BisectPlan], list[NotBisected]]:
    """The bisects to start for the report's regressions, and the regressions left out with why."""
    repo = GitRepo(report.repo)
    plans: dict[str, BisectPlan] = {}
    left_out = []
    for failure in report.regressions:
        if not failure.bisectable:
            left_out.append(NotBisected(failure.test, "absent or skipped in the good run"))
            continue
        plan = _metric_plan(failure, metric_run_template) if failure.metric else None
        if failure.case is not None:
            plan = _test_plan(failure, failure.case, run_template, repo, report.bad)
        if plan is None:
            why = 'no command measures it: give "run" in the metrics file or --metric-run-template'
            left_out.append(NotBisected(failure.test, why))
        elif plan.key in plans:
            known = plans[plan.key]
            plans[plan.key] = replace(known, failures=(*known.failures, failure.test))
        else:
            plans[plan.key] = plan
    return list(plans.values()), left_out


def _test_plan(failure: Failure, case: CaseResult, template: str, repo: GitRepo, bad: str) -> BisectPlan:
    if failure.collection_error:
        path = case.file or _collected_path(case.address, repo, bad)
        run = _fill(template, "--run-template", test=path, file=path, name="", classname=case.classname)
        return BisectPlan(path, (failure.test,), run)
    file, classes = _module_and_classes(case, repo, bad)
    name = _PARAMS.sub("", case.case)
    node_id = "::".join([file, *classes, name]) if file else name
    run = _fill(template, "--run-template", test=node_id, file=file, name=name, classname=case.classname)
    return BisectPlan(node_id, (failure.test,), run)


def _metric_plan(failure: Failure, template: str | None) -> BisectPlan | None:
    metric = failure.metric
    assert metric is not None
    if metric.run:
        run = metric.run
    elif template:
        run = _fill(template, "--metric-run-template", metric=metric.name)
    else:
        return None
    pattern = metric.pattern or rf"{re.escape(metric.name)}\s*[:=]\s*([-+]?[0-9.]+(?:[eE][-+]?\d+)?)"
    return BisectPlan(metric.name, (failure.test,), run, pattern, metric.expect)


def _module_and_classes(case: CaseResult, repo: GitRepo, bad: str) -> tuple[str, list[str]]:
    """pytest writes classname `pkg.test_mod.TestClass`: the longest prefix that is a file at the bad commit
    is the module, the rest are classes. Without such a file, the JUnit `file` attribute, else none."""
    parts = case.classname.split(".") if case.classname else []
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if repo.show_file(bad, path) is not None:
            return path, parts[end:]
    return case.file, [p for p in parts if p[:1].isupper()]


def _collected_path(address: str, repo: GitRepo, bad: str) -> str:
    """The module (`tests.test_x` -> tests/test_x.py) or directory (`tests.gpu` -> tests/gpu) a collection error
    is named after, as the bad commit holds it."""
    path = address.replace(".", "/")
    return next((p for p in (f"{path}.py", path) if repo.tree_hash(bad, p) is not None), f"{path}.py")


def _fill(template: str, option: str, **values: str) -> str:
    try:
        return template.format_map({key: shlex.quote(value) for key, value in values.items()})
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(f"{option} {template!r}: unknown placeholder {exc} (known: {', '.join(values)})") from None


@dataclass(frozen=True)
class StartedBisect:
    plan: BisectPlan
    bisect_id: int
    status: str
    first_bad: str | None


def run_bisects(
    report: TriageReport,
    plans: list[BisectPlan],
    store: Any,
    options: dict[str, Any],
    observer: Any = None,
    on_finished: Callable[[StartedBisect], None] | None = None,
) -> Iterator[StartedBisect]:
    """Start each plan's bisect through the core and run it to its end, one after the other.

    `options` are more `bisect start` keys (workers, executor, build, timeout, ...) shared by every bisect.
    """
    from bisector.runner.config import build_spec
    from bisector.runner.wiring import run_bisect

    for plan in plans:
        values = {**options, "good": report.good, "bad": report.bad, "run": plan.run}
        values["infra_patterns"] = report.infra_patterns
        if plan.metric is not None:
            values |= {"metric": plan.metric, "expect": plan.expect}
        record = run_bisect(store, build_spec(report.repo, values), observer)
        started = StartedBisect(plan, record.id, record.status.value, record.first_bad)
        if on_finished is not None:
            on_finished(started)
        yield started
