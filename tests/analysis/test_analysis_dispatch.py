"""Runtime dispatch diff, the motivating PR's shape table and its one-line conclusion."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from bisector.analysis import (
    DispatchDiff,
    Finding,
    FindingKind,
    TraceFiles,
    dispatch_diff,
    parse_dispatch_trace,
    read_dispatch_trace,
    runtime_diffs,
    shape_table,
)
from bisector.analysis.runtime import RuntimeDiffs

KIMI = [("kda_gate", 144, 7168), ("moe_router", 896, 7168), ("kda_out", 1536, 128)]


def write_trace(path: Path, decisions: list[tuple[str, int, int, int, str, str]]) -> Path:
    lines = [
        json.dumps({"op": op, "N": n, "K": k, "m": m, "kernel": kernel, "reason": reason})
        for op, n, k, m, kernel, reason in decisions
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def motivating_traces(tmp_path: Path) -> tuple[Path, Path]:
    """Last good: the Kimi-K3 shapes pinned to SIMT. First bad: MMA from m=2. DeepSeek's router unchanged."""
    good, bad = [], []
    for op, n, k in KIMI:
        for m in (1, 8):
            good.append((op, n, k, m, "simt", "table"))
            bad.append((op, n, k, m, "simt" if m == 1 else "mma", "table"))
    for decisions in (good, bad):
        decisions += [("ds_router", 256, 7168, 1, "simt", "table"), ("ds_router", 256, 7168, 8, "mma", "table")]
    bad += [("lm_head", 2048, 7168, 1, "simt", "cost_model")]
    good += [("beam", 128, 512, 4, "simt", "table")]
    return write_trace(tmp_path / "good.jsonl", good), write_trace(tmp_path / "bad.jsonl", bad)


def test_rows_per_op_shape_and_m_with_the_runs_they_appear_in(tmp_path: Path) -> None:
    diff = dispatch_diff(*motivating_traces(tmp_path))

    changed = {(r.op, r.m): (r.before, r.after) for r in diff.rows if r.changed and r.before and r.after}
    assert changed == {
        ("kda_gate", 8): ("simt", "mma"),
        ("moe_router", 8): ("simt", "mma"),
        ("kda_out", 8): ("simt", "mma"),
    }
    assert [(r.op, r.n, r.k, r.m, r.before, r.reason_before) for r in diff.only_before] == [
        ("beam", 128, 512, 4, "simt", "table")
    ]
    assert [(r.op, r.after, r.reason_after) for r in diff.only_after] == [("lm_head", "simt", "cost_model")]
    assert {(r.op, r.m, r.changed) for r in diff.rows if r.op == "kda_gate"} == {
        ("kda_gate", 1, False),
        ("kda_gate", 8, True),
    }
    assert diff.unchanged_shapes == 1  # ds_router
    assert (diff.decisions_before, diff.decisions_after) == (9, 9)


def test_the_motivating_table_and_the_batch_variant_conclusion_from_the_traces(tmp_path: Path) -> None:
    table = shape_table([], dispatch_diff(*motivating_traces(tmp_path)))

    assert table.verify_m == 8  # the smallest m at which the first bad run leaves the decode kernel
    rows = {(r.n, r.k): (r.decode_before, r.decode_after, r.verify_before, r.verify_after) for r in table.rows}
    assert rows[(144, 7168)] == rows[(896, 7168)] == rows[(1536, 128)] == ("SIMT", "SIMT", "SIMT", "MMA")
    assert rows[(128, 512)] == ("?", "?", "?", "?")
    assert table.conclusion == (
        "batch-variant: the same row takes SIMT at m=1 and MMA at m=8 for (N, K) = (144, 7168), (896, 7168), "
        "(1536, 128); at the last good commit each took SIMT at both"
    )


def static_rows(rows: dict[tuple[int, int], tuple[str | None, str | None]]) -> list[Finding]:
    return [
        Finding(FindingKind.TABLE_ENTRY, "kernels/tiny_gemm.py", "_TUNED_MMA_MIN_M", f"[({n}, {k})]", before, after)
        for (n, k), (before, after) in rows.items()
    ]


def test_the_table_from_the_static_diff_alone_as_the_pull_request_reasoned() -> None:
    findings = static_rows(
        {(144, 7168): (None, "2"), (896, 7168): ("SIMT_ONLY (1073741824)", "2"), (1536, 128): ("16", "8")}
    )
    findings.append(Finding(FindingKind.TABLE_ENTRY, "k.py", "_BLOCKS", "[(144, 7168)]", "(16, 64)", "(32, 64)"))

    table = shape_table(findings)

    assert [(r.n, r.k, r.mma_from_before, r.mma_from_after, r.source) for r in table.rows] == [
        (144, 7168, "no row", "2", "static"),
        (896, 7168, "SIMT_ONLY", "2", "static"),
        (1536, 128, "16", "8", "static"),
    ]
    assert [(r.decode_before, r.decode_after, r.verify_before, r.verify_after) for r in table.rows] == [
        ("?", "SIMT", "?", "MMA"),
        ("SIMT", "SIMT", "SIMT", "MMA"),
        ("SIMT", "SIMT", "SIMT", "MMA"),
    ]
    assert table.conclusion == (
        "batch-variant: the same row takes SIMT at m=1 and MMA at m=8 for (N, K) = (144, 7168), (896, 7168), "
        "(1536, 128)"
    )
    assert shape_table(findings, verify_m=4).conclusion == (
        "batch-variant: the same row takes SIMT at m=1 and MMA at m=4 for (N, K) = (144, 7168), (896, 7168)"
    )


def test_a_shape_that_stays_on_one_kernel_is_batch_invariant() -> None:
    table = shape_table(static_rows({(256, 7168): ("8", "16")}), verify_m=8)

    assert [(r.verify_before, r.verify_after) for r in table.rows] == [("MMA", "SIMT")]
    assert table.conclusion == "batch-invariant: every changed shape takes one kernel at m=1 and m=8"
    assert shape_table([]).conclusion is None


def test_trace_files_tolerate_torn_lines_counts_and_repeated_processes(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    line = '{"op": "g", "N": 1, "K": 2, "m": 3, "kernel": "MMA", "reason": "override"}'
    path.write_text(
        f'{line}\n{line}\n{{"op": "g", "N": 1, "K": 2, "m": 4, "kernel": "simt", "count": 5}}\n{{"op": "g", "N"\n'
    )

    trace = read_dispatch_trace(path)

    assert trace.bad_lines == 1
    assert [(d.m, d.kernel, d.reason, d.count) for d in trace.decisions] == [
        (3, "mma", "override", 1),
        (3, "mma", "override", 1),
        (4, "simt", "", 5),
    ]
    assert read_dispatch_trace(tmp_path / "missing.jsonl").decisions == ()
    diff = dispatch_diff(trace, parse_dispatch_trace([]))
    assert [(r.m, r.count_before, r.after) for r in diff.rows] == [(3, 2, None), (4, 5, None)]


def test_dispatch_rows_round_trip_through_findings(tmp_path: Path) -> None:
    diff = dispatch_diff(*motivating_traces(tmp_path))

    rebuilt = DispatchDiff.from_findings(diff.to_findings())

    assert rebuilt == diff
    assert DispatchDiff.from_findings([]) is None


def test_the_verify_m_is_guessed_as_the_largest_small_batch_that_leaves_the_decode_kernel(tmp_path: Path) -> None:
    # m=3 is a 3-token prefill, m=4 the verify of k=3 drafts, m=40 a long prefill.
    decisions = [("g", 144, 1024, m, "simt" if m == 1 else "mma", "table") for m in (1, 3, 4, 40)]
    good = write_trace(tmp_path / "good.jsonl", [(op, n, k, m, "simt", r) for op, n, k, m, _, r in decisions])
    bad = write_trace(tmp_path / "bad.jsonl", decisions)

    assert shape_table([], dispatch_diff(good, bad)).verify_m == 4
    assert shape_table([], dispatch_diff(good, bad), verify_m=40).verify_m == 40


def test_traced_reruns_write_their_own_files_and_are_diffed(tmp_path: Path) -> None:
    good = TraceFiles.under(tmp_path / "traces", "last-good", trace_kernels=True)
    bad = TraceFiles.under(tmp_path / "traces", "first-bad", trace_kernels=True)
    line = '{"op": "g", "N": 144, "K": 7168, "m": 8, "kernel": "%s", "reason": "table"}\\n'
    append = f'printf \'{line}\' "$1" >> "$KERNELS_DISPATCH_TRACE"'
    good.reset()
    bad.reset()
    for files, kernel in ((good, "simt"), (bad, "mma"), (bad, "mma")):  # the bad run has two processes
        env = {**os.environ, **files.env({"PYTHONPATH": "/opt/lib"})}
        assert env["PYTHONPATH"].endswith(f"{os.pathsep}/opt/lib")
        subprocess.run(["bash", "-c", append, "trace", kernel], env=env, check=True)

    diffs = runtime_diffs(good, bad)
    dispatch, kernels = diffs.dispatch, diffs.kernels

    assert dispatch is not None
    assert [(r.m, r.before, r.after, r.count_after) for r in dispatch.rows] == [(8, "simt", "mma", 2)]
    assert kernels is not None
    assert kernels.rows == ()  # traced, but no process imported torch
    assert runtime_diffs(TraceFiles(tmp_path / "none.jsonl"), TraceFiles(tmp_path / "none2.jsonl")) == RuntimeDiffs()


def test_a_good_table_mixing_kernels_per_shape_is_named_per_shape() -> None:
    """The shipped table runs the MoE router on MMA at every m and the other rows on SIMT: each row was batch
    invariant before the culprit, with a different kernel."""
    findings = static_rows({(144, 7168): ("SIMT_ONLY (1073741824)", "2"), (896, 7168): ("1", "2")})

    table = shape_table(findings)

    rows = {(r.n, r.k): (r.decode_before, r.decode_after, r.verify_before, r.verify_after) for r in table.rows}
    assert rows[(896, 7168)] == ("MMA", "SIMT", "MMA", "MMA")
    assert rows[(144, 7168)] == ("SIMT", "SIMT", "SIMT", "MMA")
    assert table.conclusion is not None
    assert table.conclusion.endswith(
        "; at the last good commit each took one kernel at both (MMA for (896, 7168); SIMT for (144, 7168))"
    )
