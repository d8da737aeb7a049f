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

from bisector.analysis.change_units import ChangeUnit, UnitKind
from bisector.analysis.dispatch_diff import (
    Decision,
    DispatchDiff,
    DispatchRow,
    DispatchTrace,
    dispatch_diff,
    parse_dispatch_trace,
    read_dispatch_trace,
)
from bisector.analysis.explanation import Explanation, explain_commit
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.kernel_trace import (
    KernelLaunchRow,
    KernelTrace,
    KernelTraceDiff,
    kernel_trace_diff,
    kernel_trace_env,
    read_kernel_trace,
)
from bisector.analysis.minimize import (
    MinimizeResult,
    MinimizeStatus,
    Trial,
    Variant,
    VariantTester,
    minimize,
    one_at_a_time,
)
from bisector.analysis.render import (
    explanation_json,
    markdown_lines,
    print_text,
    render_markdown,
    render_text,
    text_renderables,
)
from bisector.analysis.render_static import NO_TABLE_CHANGE, TRUST_LINE, finding_rows, static_lines
from bisector.analysis.runtime import DISPATCH_TRACE_ENV, TraceFiles, runtime_diffs
from bisector.analysis.shape_table import ShapeRow, ShapeTable, shape_table
from bisector.analysis.static_diff import StaticDiff, explain

__all__ = [
    "DISPATCH_TRACE_ENV",
    "NO_TABLE_CHANGE",
    "TRUST_LINE",
    "ChangeUnit",
    "Decision",
    "DispatchDiff",
    "DispatchRow",
    "DispatchTrace",
    "Explanation",
    "Finding",
    "FindingKind",
    "KernelLaunchRow",
    "KernelTrace",
    "KernelTraceDiff",
    "MinimizeResult",
    "MinimizeStatus",
    "ShapeRow",
    "ShapeTable",
    "StaticDiff",
    "TraceFiles",
    "Trial",
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
    "markdown_lines",
    "minimize",
    "one_at_a_time",
    "parse_dispatch_trace",
    "print_text",
    "read_dispatch_trace",
    "read_kernel_trace",
    "render_markdown",
    "render_text",
    "runtime_diffs",
    "shape_table",
    "static_lines",
    "text_renderables",
]
