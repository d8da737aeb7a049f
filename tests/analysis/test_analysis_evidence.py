"""Each static row says what the traced re-runs made of it: confirmed at run time, contradicted, or a static lead;
confirmed rows first, in every format and after the round trip through the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from analysis_history import History

from bisector.analysis import (
    Explanation,
    Finding,
    TraceFiles,
    dispatch_diff,
    explain,
    explanation_json,
    parse_dispatch_trace,
    render_markdown,
    render_text,
    runtime_diffs,
)
from bisector.analysis.call_trace import traced_functions
from bisector.analysis.evidence import Evidence
from bisector.analysis.render_static import TRUST_LINE

GEMM = """\
    SIMT_ONLY = 1073741824

    _TUNED_MMA_MIN_M: dict[tuple[int, int], int] = {
        (144, 7168): SIMT_ONLY,
        (896, 7168): SIMT_ONLY,
        (1536, 128): SIMT_ONLY,
    }
"""
# (1536, 128) first in the diff, so that the confirmed row has to move up
CULPRIT = GEMM.replace("(144, 7168): SIMT_ONLY", "(144, 7168): 2").replace("(896, 7168): SIMT_ONLY", "(896, 7168): 8")
CULPRIT = CULPRIT.replace("(1536, 128): SIMT_ONLY", "(1536, 128): 4")


def _trace(verify_kernel: str) -> list[str]:
    """(144, 7168) switches at m=4 with the culprit; (896, 7168) is dispatched alike at both; (1536, 128) never."""
    rows = [
        {"op": "kda_gate", "N": 144, "K": 7168, "m": 1, "kernel": "simt", "reason": "table"},
        {"op": "kda_gate", "N": 144, "K": 7168, "m": 4, "kernel": verify_kernel, "reason": "table"},
        {"op": "moe_router", "N": 896, "K": 7168, "m": 4, "kernel": "simt", "reason": "table"},
    ]
    return [json.dumps(row) for row in rows]


def _dispatch_explanation(history: History) -> Explanation:
    history.commit("tiny gemm", {"kernels/tiny_gemm.py": GEMM.replace("(144, 7168)", "(1536, 7)")})
    base = history.commit("rows", {"kernels/tiny_gemm.py": GEMM})
    culprit = history.commit("Tiny GEMM with batch-size dispatch", {"kernels/tiny_gemm.py": CULPRIT})
    return Explanation(
        static=explain(history.path, culprit, base),
        dispatch=dispatch_diff(parse_dispatch_trace(_trace("simt")), parse_dispatch_trace(_trace("mma"))),
    )


def test_dispatch_trace_confirms_contradicts_or_leaves_each_shape_row(history: History) -> None:
    explanation = _dispatch_explanation(history)

    checked = [(row.finding.key, row.evidence, row.why) for row in explanation.checked]
    assert checked == [
        ("[(144, 7168)]", Evidence.RUNTIME, "traced dispatch of (144, 7168): kda_gate m=4 simt -> mma"),
        ("[(1536, 128)]", Evidence.STATIC, "the traced runs never dispatched (1536, 128)"),
        (
            "[(896, 7168)]",
            Evidence.CONTRADICTED,
            "traced dispatch of (896, 7168) (moe_router): the same kernel at both commits at every m",
        ),
    ]

    data = explanation_json(explanation)["static"]
    assert isinstance(data, dict)
    assert [(f["key"], f["evidence"]) for f in data["findings"]] == [
        ("[(144, 7168)]", "runtime"),
        ("[(1536, 128)]", "static"),
        ("[(896, 7168)]", "contradicted"),
    ]
    assert data["trust"] == TRUST_LINE

    text = render_text(explanation, width=200)
    assert "(1 confirmed at run time, 1 static lead, 1 contradicted at run time)" in text
    lines = [line.strip() for line in text.splitlines()]
    row = "kernels/tiny_gemm.py:4  _TUNED_MMA_MIN_M[(144, 7168)]: SIMT_ONLY (1073741824) -> 2"
    confirmed = lines.index(f"confirmed at run time: {row}")
    assert lines[confirmed + 1] == "traced dispatch of (144, 7168): kda_gate m=4 simt -> mma"
    assert lines[confirmed + 2].startswith("static lead: kernels/tiny_gemm.py:6  _TUNED_MMA_MIN_M[(1536, 128)]")
    assert lines[confirmed + 4].startswith("contradicted at run time: kernels/tiny_gemm.py:5  _TUNED_MMA_MIN_M[(896,")
    assert TRUST_LINE in " ".join(text.split())

    markdown = render_markdown(explanation)
    assert (
        "| contradicted at run time | `kernels/tiny_gemm.py:5` | `_TUNED_MMA_MIN_M[(896, 7168)]` "
        "| SIMT_ONLY (1073741824) | 8 "
        "| traced dispatch of (896, 7168) (moe_router): the same kernel at both commits at every m |"
    ) in markdown
    assert f"_{TRUST_LINE}_" in markdown

    stored = [Finding.from_json(json.loads(json.dumps(f.to_json()))) for f in explanation.findings()]
    assert Explanation.from_findings(stored).checked == explanation.checked


def test_an_explanation_stored_before_unchanged_shapes_were_kept_claims_no_contradiction(history: History) -> None:
    explanation = _dispatch_explanation(history)
    old_rows = [f for f in explanation.findings() if not (f.kind.value == "dispatch" and f.key.count("=") == 2)]

    rebuilt = Explanation.from_findings(old_rows)

    assert [(row.finding.key, row.evidence, row.why) for row in rebuilt.checked][1:] == [
        ("[(896, 7168)]", Evidence.STATIC, ""),
        ("[(1536, 128)]", Evidence.STATIC, ""),
    ]  # unknown whether the runs dispatched these shapes: neither "contradicted" nor "never dispatched"


def test_without_traced_reruns_every_row_is_a_static_lead(history: History) -> None:
    explanation = Explanation(static=_dispatch_explanation(history).static)

    assert {row.evidence for row in explanation.checked} == {Evidence.STATIC}
    assert [row.finding.key for row in explanation.checked] == ["[(144, 7168)]", "[(896, 7168)]", "[(1536, 128)]"]
    assert "3 static leads" in render_text(explanation)


DISPATCH = """\
    def pick_kernel(n, k, m):
        if m >= 16:
            return "mma"
        return "simt"


    def pick_tile(n, k, m):
        if m > 64:
            return 128
        return 32


    def pick_stages(n, k, m):
        if m > 8:
            return 4
        return 2
"""
APP = """\
    from mylib.dispatch import pick_kernel, pick_tile

    for m in (1, 4, 32):
        pick_kernel(4096, 7168, m)
        pick_tile(4096, 7168, m)
"""


def _run_traced(history: History, sha: str, files: TraceFiles, tmp_path: Path) -> None:
    work = tmp_path / sha[:12]
    history.git("worktree", "add", "-q", "--detach", str(work), sha)
    env = {**os.environ, "PYTHONPATH": str(work / "src")}
    env.update(files.env(env))
    subprocess.run([sys.executable, "app.py"], cwd=work, env=env, check=True, capture_output=True, text=True)


def test_without_a_dispatch_trace_the_traced_functions_are_the_evidence(history: History, tmp_path: Path) -> None:
    """A stack that writes no dispatch trace: the functions the static diff names are wrapped in real runs. The one
    whose results moved is confirmed, the one that returned the same for every call is contradicted, the one the
    test never called stays a static lead."""
    good = history.commit("dispatch", {"src/mylib/__init__.py": "", "src/mylib/dispatch.py": DISPATCH, "app.py": APP})
    changed = DISPATCH.replace("m >= 16", "m >= 2").replace("m > 64", "m > 48").replace("m > 8", "m > 4")
    bad = history.commit("retune", {"src/mylib/dispatch.py": changed})
    static = explain(history.path, bad, good)
    functions = traced_functions(static)
    assert functions == [
        "src/mylib/dispatch.py:pick_kernel",
        "src/mylib/dispatch.py:pick_tile",
        "src/mylib/dispatch.py:pick_stages",
    ]
    traces = tmp_path / "traces"
    good_files = TraceFiles.under(traces, "last-good", trace_kernels=False, functions=functions)
    bad_files = TraceFiles.under(traces, "first-bad", trace_kernels=False, functions=functions)
    for files, sha in ((good_files, good), (bad_files, bad)):
        files.reset()
        _run_traced(history, sha, files, tmp_path)
    diffs = runtime_diffs(good_files, bad_files)
    assert diffs.dispatch is None  # the stack writes no dispatch trace

    explanation = Explanation(static=static, calls=diffs.calls)

    assert [(row.finding.name, row.evidence, row.why) for row in explanation.checked] == [
        (
            "pick_kernel",
            Evidence.RUNTIME,
            "traced calls: mylib.dispatch:pick_kernel(4096, 7168, 4) 'simt' -> 'mma'",
        ),
        ("pick_stages", Evidence.STATIC, "src/mylib/dispatch.py:pick_stages was traced, but the test never called it"),
        (
            "pick_tile",
            Evidence.CONTRADICTED,
            "traced calls: each of the 3 recorded calls of src/mylib/dispatch.py:pick_tile gave the same result at "
            "both commits",
        ),
    ]
    stored = [Finding.from_json(json.loads(json.dumps(f.to_json()))) for f in explanation.findings()]
    assert Explanation.from_findings(stored).checked == explanation.checked
