"""The explanation as the report shows it: the motivating PR's table and conclusion, in text, Markdown and JSON,
rebuilt from stored findings."""

from __future__ import annotations

import json
from pathlib import Path

from analysis_history import History

from bisector.analysis import (
    NO_TABLE_CHANGE,
    Explanation,
    Finding,
    KernelLaunchRow,
    KernelTraceDiff,
    dispatch_diff,
    explain,
    explanation_json,
    minimize,
    parse_dispatch_trace,
    render_markdown,
    render_text,
)
from bisector.variant_tester import ShellVariantTester

GEMM = """\
    SIMT_ONLY = 1073741824

    _TUNED_MMA_MIN_M: dict[tuple[int, int], int] = {
        (128, 512): SIMT_ONLY,  # beam-search scorer
        (144, 7168): SIMT_ONLY,  # Kimi-K3 KDA gate
        (256, 7168): 8,  # DeepSeek-V3 router
        (896, 7168): SIMT_ONLY,  # Kimi-K3 MoE router
        (1536, 128): SIMT_ONLY,  # Kimi-K3 KDA output up-projection
    }


    def describe():
        return "tiny gemm"
"""
CULPRIT = (
    GEMM.replace("(144, 7168): SIMT_ONLY", "(144, 7168): 2")
    .replace("(896, 7168): SIMT_ONLY", "(896, 7168): 2")
    .replace("(1536, 128): SIMT_ONLY", "(1536, 128): 2")
    .replace('"tiny gemm"', '"tiny GEMM"')
)
TEST = """\
rows=$(grep -cE '^ +\\((144, 7168|896, 7168|1536, 128)\\): 2,' kernels/tiny_gemm.py)
if [ "$rows" = 3 ]; then echo "accept length 3.4595"; exit 1; fi
echo "accept length 4.0"
"""


def trace(kimi_verify_kernel: str) -> str:
    rows = []
    for op, n, k in (("kda_gate", 144, 7168), ("moe_router", 896, 7168), ("kda_out", 1536, 128)):
        rows.append({"op": op, "N": n, "K": k, "m": 1, "kernel": "simt", "reason": "table"})
        rows.append({"op": op, "N": n, "K": k, "m": 8, "kernel": kimi_verify_kernel, "reason": "table"})
    return "\n".join(json.dumps(row) for row in rows)


def explained(history: History, tmp_path: Path) -> Explanation:
    history.commit("tiny gemm", {"kernels/tiny_gemm.py": GEMM, "test.sh": TEST})
    culprit = history.commit("Tiny GEMM with batch-size dispatch (#47683)", {"kernels/tiny_gemm.py": CULPRIT})
    tester = ShellVariantTester(history.path, tmp_path / "scratch", "bash test.sh", timeout_s=30)
    return Explanation(
        static=explain(history.path, culprit),
        dispatch=dispatch_diff(
            parse_dispatch_trace(trace("simt").splitlines()), parse_dispatch_trace(trace("mma").splitlines())
        ),
        kernels=KernelTraceDiff((KernelLaunchRow("tiny_gemm_mma_kernel", 0, 24),), unchanged=3, devices=("cuda",)),
        minimized=minimize(history.path, culprit, tester, check_endpoints=False),
    )


CONCLUSION = (
    "batch-variant: the same row takes SIMT at m=1 and MMA at m=8 for (N, K) = (144, 7168), (896, 7168), "
    "(1536, 128); at the last good commit each took SIMT at both"
)


def test_text_report_shows_what_the_pull_request_showed(history: History, tmp_path: Path) -> None:
    text = render_text(explained(history, tmp_path), width=160)

    assert " ".join(text.split()).startswith(CONCLUSION)
    assert "kernels/tiny_gemm.py:5  _TUNED_MMA_MIN_M[(144, 7168)]: SIMT_ONLY (1073741824) -> 2" in text
    lines = [" ".join(line.replace("│", " ").split()) for line in text.splitlines()]
    assert "(144, 7168) SIMT_ONLY -> 2 SIMT SIMT -> MMA kda_gate static+trace" in lines
    assert "(1536, 128) SIMT_ONLY -> 2 SIMT SIMT -> MMA kda_out static+trace" in lines
    assert "kda_gate (144, 7168) 8 simt (table) mma (table)" in lines
    assert "tiny_gemm_mma_kernel - 24" in lines
    assert "minimised culprit: 3 of 4 change units reproduce the bad verdict" in text
    assert "+ (896, 7168): 2, # Kimi-K3 MoE router" in lines
    assert "tiny GEMM" not in text


def test_markdown_and_json_and_the_round_trip_through_stored_findings(history: History, tmp_path: Path) -> None:
    explanation = explained(history, tmp_path)

    markdown = render_markdown(explanation)
    assert f"**{CONCLUSION}**" in markdown
    assert "| (N, K) | MMA from m | decode m=1 path | verify m=8 path | ops | from |" in markdown
    assert "| (896, 7168) | SIMT_ONLY -> 2 | SIMT | SIMT -> MMA | moe_router | static+trace |" in markdown
    assert "| `kernels/tiny_gemm.py:7` | `_TUNED_MMA_MIN_M[(896, 7168)]` | SIMT_ONLY (1073741824) | 2 |" in markdown
    assert "```diff\n# kernels/tiny_gemm.py:5 _TUNED_MMA_MIN_M[(144, 7168)]\n-    (144, 7168): SIMT_ONLY," in markdown

    data = explanation_json(explanation)
    assert data["conclusion"] == CONCLUSION
    assert json.loads(json.dumps(data)) == data
    shapes = data["shapes"]
    assert isinstance(shapes, dict)
    assert shapes["rows"][0] == {
        "N": 144, "K": 7168, "ops": ["kda_gate"], "mma_from": ["SIMT_ONLY", "2"], "decode": ["SIMT", "SIMT"],
        "verify": ["SIMT", "MMA"], "batch_variant": True, "source": "static+trace",
    }  # fmt: skip

    stored = [Finding.from_json(json.loads(json.dumps(f.to_json()))) for f in explanation.findings()]
    rebuilt = Explanation.from_findings(stored)
    assert render_text(rebuilt) == render_text(explanation)
    assert render_markdown(rebuilt) == render_markdown(explanation)


def test_a_culprit_without_table_changes_says_so_in_every_format(history: History) -> None:
    history.commit("a", {"kernels/tiny_gemm.py": GEMM})
    sha = history.commit("docs", {"kernels/tiny_gemm.py": GEMM.replace('"tiny gemm"', '"tiny GEMM"')})
    explanation = Explanation(static=explain(history.path, sha))

    assert NO_TABLE_CHANGE in render_text(explanation)
    assert f"{NO_TABLE_CHANGE}." in render_markdown(explanation)
    static = explanation_json(explanation)["static"]
    assert isinstance(static, dict)
    assert (static["changes_dispatch"], static["message"]) == (False, NO_TABLE_CHANGE)
    assert explanation.conclusion is None
    rebuilt = Explanation.from_findings(explanation.findings())
    assert NO_TABLE_CHANGE in render_text(rebuilt)


def test_a_root_commit_is_diffed_against_the_empty_tree_said_in_full(history: History) -> None:
    root = history.commit("tiny gemm", {"kernels/tiny_gemm.py": GEMM})
    explanation = Explanation(static=explain(history.path, root))
    assert f"static table diff of {root[:12]} against the empty tree\n" in render_text(explanation, width=160)
    assert f"Static table diff of `{root[:12]}` against the empty tree" in render_markdown(explanation)
