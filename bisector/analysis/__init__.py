"""Explain a culprit: what its tables and thresholds change, what dispatch and kernels change at run time,
and which of its lines are needed to reproduce the bad verdict.

    explain(repo, culprit, parent)            the one entry: the findings of every table / threshold / tuning-file
                                              / condition change (StaticDiff); the runner, the CLI and the report
                                              all read these
    dispatch_diff(good_trace, bad_trace)      kernels per (op, N, K, m), last good -> first bad
    kernel_trace_env(file) / kernel_trace_diff kernel launches of any PyTorch program, via sitecustomize
    minimize(repo, culprit, tester)           ddmin over the culprit's hunks and table entries
    TraceFiles / runtime_diffs                the coordinator's traced re-runs of last good and first bad
    Explanation + render_text / render_markdown / explanation_json   the report sections
    explain_commit(repo, rev)                 `bisect explain REV`: explain()'s findings as an Explanation
"""

from bisector.analysis.change_units import UnitKind
from bisector.analysis.dispatch_diff import DispatchDiff, dispatch_diff, parse_dispatch_trace, read_dispatch_trace
from bisector.analysis.explanation import Explanation, explain_commit
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.kernel_trace import (
    KernelLaunchRow,
    KernelTraceDiff,
    kernel_trace_diff,
    kernel_trace_env,
    read_kernel_trace,
)
from bisector.analysis.minimize import MinimizeResult, MinimizeStatus, Variant, VariantTester, minimize, one_at_a_time
from bisector.analysis.render import explanation_json, render_markdown, render_text, text_renderables
from bisector.analysis.render_static import NO_TABLE_CHANGE, finding_rows
from bisector.analysis.runtime import TraceFiles, runtime_diffs
from bisector.analysis.shape_table import shape_table
from bisector.analysis.static_diff import StaticDiff, explain

__all__ = [
    "NO_TABLE_CHANGE",
    "DispatchDiff",
    "Explanation",
    "Finding",
    "FindingKind",
    "KernelLaunchRow",
    "KernelTraceDiff",
    "MinimizeResult",
    "MinimizeStatus",
    "StaticDiff",
    "TraceFiles",
    "UnitKind",
    "Variant",
    "VariantTester",
    "dispatch_diff",
    "explain",
    "explain_commit",
    "explanation_json",
    "finding_rows",
    "kernel_trace_diff",
    "kernel_trace_env",
    "minimize",
    "one_at_a_time",
    "parse_dispatch_trace",
    "read_dispatch_trace",
    "read_kernel_trace",
    "render_markdown",
    "render_text",
    "runtime_diffs",
    "shape_table",
    "text_renderables",
]
