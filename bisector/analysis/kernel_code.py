"""The GPU kernels whose own code a commit changes: each kernel (code_shape.decorated_as_kernel: @triton.jit, a
bare @jit, autotune, heuristics) of a Python module whose text differs is a kernel_code row, its decorator the
detail. Not a dispatch row (a kernel's code computes rather than chooses, so the corpora do not score it): it names
what a regression outside the dispatch may come from, and the kernel trace of the traced re-runs
(kernel_trace.KernelTraceDiff.launches) says whether the test launched it."""

from __future__ import annotations

from bisector.analysis.changed_statements import changed_functions
from bisector.analysis.code_shape import ParsedSource, decorated_as_kernel, kernel_decorator
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.kernel_trace import KernelTraceDiff


def kernel_code_rows(path: str, before: ParsedSource | None, after: ParsedSource | None) -> list[Finding]:
    if before is None or after is None:
        return []
    changed = changed_functions(before, after, lambda _, node: not decorated_as_kernel(node))
    return [
        Finding(FindingKind.KERNEL_CODE, path, name, line=new.lineno, detail=f"@{kernel_decorator(new)}")
        for name, _, new in changed
    ]


def launch_evidence(row: Finding, kernels: KernelTraceDiff | None) -> str:
    """What the traced re-runs' kernel trace says of a kernel_code row ("" without one)."""
    if kernels is None:
        return ""
    launched = kernels.launches(row.name.rsplit(".", 1)[-1])
    if launched is None:
        return "not launched under this name by the traced runs (a @jit helper runs inside the kernels that call it)"
    return f"the test launched it: {launched.before} at the last good, {launched.after} at the first bad"
