"""The report's summary lines in plain words: the runtime dispatch table names its m values, no jargon."""

from __future__ import annotations

import json

from bisector.analysis import Explanation, dispatch_diff, parse_dispatch_trace, render_markdown, render_text


def _trace(verify_kernel: str) -> list[str]:
    rows = []
    for op, n, k in (("kda_gate", 144, 7168), ("kda_out", 1536, 128)):
        rows.append({"op": op, "N": n, "K": k, "m": 1, "kernel": "simt", "reason": "table"})
        rows.append({"op": op, "N": n, "K": k, "m": 4, "kernel": verify_kernel, "reason": "table"})
    return [json.dumps(row) for row in rows]


def test_the_runtime_dispatch_table_names_its_m_values_in_plain_words() -> None:
    explanation = Explanation(
        dispatch=dispatch_diff(parse_dispatch_trace(_trace("simt")), parse_dispatch_trace(_trace("mma")))
    )
    text = " ".join(render_text(explanation, width=200).split())
    assert "runtime dispatch at m = 1, 4 (last good -> first bad)" in text
    assert "2 (op, N, K, m) took another kernel" in text
    assert "the traced runs made 4 dispatch decisions at the last good commit and 4 at the first bad" in text
    assert "decisions traced" not in text
    markdown = render_markdown(explanation)
    assert "<summary>Runtime dispatch at m = 1, 4 (last good -> first bad): 2 (op, N, K, m) took another" in markdown
