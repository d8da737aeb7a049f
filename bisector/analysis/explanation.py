"""Explanation: everything the analysis found about one culprit, as the report shows and the store keeps it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from bisector.analysis.call_trace import CallTraceDiff
from bisector.analysis.dispatch_diff import DispatchDiff
from bisector.analysis.evidence import CheckedRow, checked_rows
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.kernel_trace import KernelTraceDiff
from bisector.analysis.minimize import MinimizeResult
from bisector.analysis.shape_table import DEFAULT_DECODE_M, ShapeTable, shape_table
from bisector.analysis.static_diff import StaticDiff, explain


@dataclass(frozen=True)
class Explanation:
    static: StaticDiff | None = None  # the culprit's table diff against its parent
    dispatch: DispatchDiff | None = None  # dispatch traces, last good vs first bad
    kernels: KernelTraceDiff | None = None  # generic kernel traces, last good vs first bad
    minimized: MinimizeResult | None = None  # the culprit's smallest failing set of changes
    calls: CallTraceDiff | None = None  # results of the traced functions, last good vs first bad
    trace_note: str | None = None  # whether the traced re-runs ran or why not, and how to ask for them
    decode_m: int = DEFAULT_DECODE_M
    verify_m: int | None = None  # k + 1 of the speculative test; None: read from the traces (else 8)

    @property
    def shapes(self) -> ShapeTable:
        findings = self.static.findings if self.static else ()
        return shape_table(findings, self.dispatch, decode_m=self.decode_m, verify_m=self.verify_m)

    @property
    def checked(self) -> tuple[CheckedRow, ...]:
        """The static diff's rows, each with what the traced re-runs say of it, confirmed rows first."""
        return checked_rows(self.static.table_findings if self.static else (), self.dispatch, self.calls)

    @property
    def conclusion(self) -> str | None:
        return self.shapes.conclusion

    def findings(self) -> list[Finding]:
        """Every row, for the store's findings table; from_findings() rebuilds the explanation from them."""
        rows: list[Finding] = []
        if self.static is not None:
            rows += self.static.to_findings()
        if self.dispatch is not None:
            rows += self.dispatch.to_findings()
        if self.kernels is not None:
            rows += self.kernels.to_findings()
        if self.calls is not None:
            rows += self.calls.to_findings()
        if self.trace_note is not None:
            rows.append(Finding(FindingKind.TRACE_NOTE, "", "traced re-runs", detail=self.trace_note))
        if self.minimized is not None:
            rows += self.minimized.to_findings()
        return rows

    @classmethod
    def from_findings(cls, findings: Sequence[Finding]) -> Explanation:
        return cls(
            static=StaticDiff.from_findings(findings),
            dispatch=DispatchDiff.from_findings(findings),
            kernels=KernelTraceDiff.from_findings(findings),
            minimized=MinimizeResult.from_findings(findings),
            calls=CallTraceDiff.from_findings(findings),
            trace_note=next((f.detail for f in findings if f.kind is FindingKind.TRACE_NOTE), None),
        )


def explain_commit(repo_path: str | os.PathLike[str], rev: str, *, verify_m: int | None = None) -> Explanation:
    """`bisect explain REV`: explain()'s findings for any commit, without a bisect, as the report shows them."""
    return Explanation(static=explain(repo_path, rev), verify_m=verify_m)
