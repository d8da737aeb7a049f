"""Kernels whose code a commit changes: named beside the dispatch rows (never as one), with what the traced runs'
kernel trace says of each, in every report format and after the store's round trip."""

from __future__ import annotations

import json
from pathlib import Path

from analysis_history import History

from bisector.analysis import explain
from bisector.analysis.explanation import Explanation
from bisector.analysis.kernel_trace import KernelLaunchRow, KernelTraceDiff, kernel_trace_diff, read_kernel_trace
from bisector.analysis.render import explanation_json, render_markdown, render_text

OPS = """
import triton
import triton.language as tl


@triton.jit
def _scale(x, s):
    return x * s


@triton.jit
def cross_entropy_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, _scale(x, 1.0), mask=offs < n)


@triton.jit
def untouched_kernel(X, n):
    pass


def cross_entropy(x, y):
    n = x.numel()
    cross_entropy_kernel[(1,)](x, y, n, BLOCK=1024)
    return y
"""


def _culprit(history: History) -> str:
    history.commit("kernels", {"ops/ce.py": OPS})
    changed = OPS.replace("return x * s", "return x * s * 0.5").replace(
        "tl.store(Y + offs, _scale(x, 1.0)", "tl.store(Y + offs, _scale(x, 2.0) - 1.0"
    )
    return history.commit("single-shot gradient", {"ops/ce.py": changed.replace("return y", "return y  # out")})


def _trace(path: Path, counts: dict[str, int]) -> Path:
    # The hook's record (bisector/analysis/hook): one line per traced process.
    path.write_text(json.dumps({"pid": 1, "argv": ["t"], "device": "cuda", "kernels": counts}) + "\n")
    return path


def test_changed_triton_kernels_are_named_and_no_dispatch_row_is_made(history: History) -> None:
    diff = explain(history.path, _culprit(history))

    assert [(row.file, row.name, row.detail) for row in diff.kernel_changes] == [
        ("ops/ce.py", "_scale", "@triton.jit"),
        ("ops/ce.py", "cross_entropy_kernel", "@triton.jit"),
    ]  # not untouched_kernel, not the host function cross_entropy
    assert not diff.changes_dispatch


def test_each_changed_kernel_says_whether_the_traced_runs_launched_it(history: History, tmp_path: Path) -> None:
    counts = {"cross_entropy_kernel": 4, "untouched_kernel": 4, "void at::native::vectorized_elementwise_kernel": 9}
    kernels = kernel_trace_diff(
        read_kernel_trace(_trace(tmp_path / "good.jsonl", counts)),
        read_kernel_trace(_trace(tmp_path / "bad.jsonl", {**counts, "untouched_kernel": 2})),
    )
    explanation = Explanation(static=explain(history.path, _culprit(history)), kernels=kernels)

    text = render_text(explanation, width=200)
    assert "kernel code changed: ops/ce.py:12  cross_entropy_kernel (@triton.jit)" in text
    assert "the test launched it: 4 at the last good, 4 at the first bad" in text
    assert "_scale (@triton.jit)\n      not launched under this name by the traced runs" in text
    assert "the test launched it: 4 at the last good, 4 at the first bad" in render_markdown(explanation)
    rows = explanation_json(explanation)["static"]["kernel_code"]
    assert [(row["name"], row["launches"].split(":")[0]) for row in rows] == [
        (
            "_scale",
            "not launched under this name by the traced runs (a @jit helper runs inside the kernels that call it)",
        ),
        ("cross_entropy_kernel", "the test launched it"),
    ]

    stored = Explanation.from_findings(explanation.findings())  # what the store keeps and the report reads back
    assert stored.kernels is not None
    assert stored.kernels.unchanged == 2
    assert stored.kernels.launches("cross_entropy_kernel") == KernelLaunchRow("cross_entropy_kernel", 4, 4)
    assert render_text(stored, width=200) == text


def test_without_a_kernel_trace_the_rows_are_named_without_launches(history: History) -> None:
    text = render_text(Explanation(static=explain(history.path, _culprit(history))), width=200)

    assert "kernel code changed: ops/ce.py:12  cross_entropy_kernel (@triton.jit)" in text
    assert "launched" not in text


def test_a_kernel_is_found_under_the_names_triton_gives_it() -> None:
    rows = (
        KernelLaunchRow("_fwd_kernel_0d1d2d3de", 1, 1),  # Triton before 2.1: the signature appended
        KernelLaunchRow("void at::native::(anonymous namespace)::softmax_warp<float, 8>(float*, int)", 2, 2),
        KernelLaunchRow("attn_bwd", 3, 3),
    )
    kernels = KernelTraceDiff((), 3, ("cuda",), rows)

    assert kernels.launches("_fwd_kernel") == rows[0]
    assert kernels.launches("softmax_warp") is None  # a C++ kernel of that name is no Triton kernel
    assert kernels.launches("attn") is None  # attn_bwd is another kernel
    assert kernels.launches("attn_bwd") == rows[2]
