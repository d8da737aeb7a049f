"""How far the traced re-runs bear out each static row: confirmed at run time, contradicted, or a static lead.

A static row is a guess from the diff; the traced re-runs of the last good and the first bad commit record what
was actually chosen. A row is linked to the recorded calls it names:

    a row keyed by a shape, "[(N, K)]"        the dispatch trace's decisions for (N, K), any op, any m
    a row naming a function the runs traced  that function's recorded calls (call_trace.traced_function)

and is then RUNTIME (some linked call gave another value at the first bad commit than at the last good, or
happened at one of them only), CONTRADICTED (linked calls were recorded, and each gave the same value at both), or
STATIC (no linked call was recorded: nothing ran that could confirm it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from bisector.analysis.call_trace import CallTraceDiff, is_recorded_name, traced_function
from bisector.analysis.dispatch_diff import DispatchDiff, DispatchRow
from bisector.analysis.findings import ABSENT_TEXT, Finding

MAX_SHOWN_CALLS = 3
_SHAPE_KEY = re.compile(r"^\[\((-?\d+), (-?\d+)\)\]$")


class Evidence(StrEnum):
    RUNTIME = "runtime"  # a call the row names gave another value at the first bad commit than at the last good
    STATIC = "static"  # no call the row names was recorded: a lead from the diff alone
    CONTRADICTED = "contradicted"  # the calls the row names gave the same value at both commits

    @property
    def rank(self) -> int:
        """Confirmed rows first, contradicted ones last."""
        return (Evidence.RUNTIME, Evidence.STATIC, Evidence.CONTRADICTED).index(self)

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Evidence.RUNTIME: "confirmed at run time",
    Evidence.STATIC: "static lead",
    Evidence.CONTRADICTED: "contradicted at run time",
}


@dataclass(frozen=True)
class CheckedRow:
    finding: Finding
    evidence: Evidence
    why: str = ""  # what the traced re-runs recorded for it; empty where they recorded nothing it names


def checked_rows(
    findings: Sequence[Finding], dispatch: DispatchDiff | None, calls: CallTraceDiff | None
) -> tuple[CheckedRow, ...]:
    """Each row with its evidence, confirmed rows first (the diff's order kept within each kind of evidence)."""
    rows = [_check(finding, dispatch, calls) for finding in findings]
    return tuple(sorted(rows, key=lambda row: row.evidence.rank))


def _check(finding: Finding, dispatch: DispatchDiff | None, calls: CallTraceDiff | None) -> CheckedRow:
    shape = _SHAPE_KEY.match(finding.key)
    target = traced_function(finding)
    checks = [
        *([_by_dispatch(finding, (int(shape[1]), int(shape[2])), dispatch)] if shape and dispatch else []),
        *([_by_calls(finding, target, calls)] if target and calls else []),
    ]
    return min(checks, key=lambda row: row.evidence.rank, default=CheckedRow(finding, Evidence.STATIC))


def _by_dispatch(finding: Finding, shape: tuple[int, int], dispatch: DispatchDiff) -> CheckedRow:
    n, k = shape
    changed = [row for row in dispatch.rows if row.shape == shape and row.changed]
    if changed:
        shown = "; ".join(_dispatch_change(row) for row in changed[:MAX_SHOWN_CALLS])
        more = f" (and {len(changed) - MAX_SHOWN_CALLS} more)" if len(changed) > MAX_SHOWN_CALLS else ""
        return CheckedRow(finding, Evidence.RUNTIME, f"traced dispatch of ({n}, {k}): {shown}{more}")
    ops = [op for op, *key in dispatch.unchanged_keys if tuple(key) == shape]
    if ops:
        why = f"traced dispatch of ({n}, {k}) ({', '.join(ops)}): the same kernel at both commits at every m"
        return CheckedRow(finding, Evidence.CONTRADICTED, why)
    if len(dispatch.unchanged_keys) < dispatch.unchanged_shapes:
        return CheckedRow(finding, Evidence.STATIC)  # stored before the unchanged shapes were kept: unknown
    return CheckedRow(finding, Evidence.STATIC, f"the traced runs never dispatched ({n}, {k})")


def _dispatch_change(row: DispatchRow) -> str:
    return f"{row.op} m={row.m} {row.before or ABSENT_TEXT} -> {row.after or ABSENT_TEXT}"


def _by_calls(finding: Finding, target: str, calls: CallTraceDiff) -> CheckedRow:
    changed = [row for row in calls.rows if is_recorded_name(target, row.function)]
    if changed:
        shown = "; ".join(
            f"{row.function}({row.args}) {row.before or ABSENT_TEXT} -> {row.after or ABSENT_TEXT}"
            for row in changed[:MAX_SHOWN_CALLS]
        )
        more = f" (and {len(changed) - MAX_SHOWN_CALLS} more calls)" if len(changed) > MAX_SHOWN_CALLS else ""
        return CheckedRow(finding, Evidence.RUNTIME, f"traced calls: {shown}{more}")
    same = sum(count for function, count in calls.unchanged_by_function if is_recorded_name(target, function))
    if same:
        why = f"traced calls: each of the {same} recorded calls of {target} gave the same result at both commits"
        return CheckedRow(finding, Evidence.CONTRADICTED, why)
    if target in calls.functions and sum(count for _, count in calls.unchanged_by_function) == calls.unchanged:
        return CheckedRow(finding, Evidence.STATIC, f"{target} was traced, but the test never called it")
    return CheckedRow(finding, Evidence.STATIC)
