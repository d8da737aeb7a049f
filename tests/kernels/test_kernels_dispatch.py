"""The dispatcher: the table literal, thresholds and their reasons, overrides, the trace, batch variance."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bisector.kernels import tiny_gemm, trace
from bisector.kernels.model import CONFIGS
from bisector.kernels.tiny_gemm import SIMT_ONLY, Kernel, Reason

TABLE_SOURCE = Path(tiny_gemm.__file__)
DECODER_SHAPES = [(144, 1024), (896, 1024), (144, 7168), (896, 7168), (1536, 128)]
BAD = json.dumps({f"{n}x{k}": 2 for n, k in DECODER_SHAPES})


def _table_node():
    module = ast.parse(TABLE_SOURCE.read_text())
    for node in module.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_TUNED_MMA_MIN_M":
            return node.value
    raise AssertionError("no _TUNED_MMA_MIN_M")


def test_table_is_a_plain_literal_one_row_per_line():
    table = _table_node()
    assert isinstance(table, ast.Dict)
    lines = [key.lineno for key in table.keys]
    assert len(set(lines)) == len(lines)
    for key, value in zip(table.keys, table.values, strict=True):
        assert isinstance(key, ast.Tuple)
        assert all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in key.elts)
        assert (isinstance(value, ast.Constant) and isinstance(value.value, int)) or (
            isinstance(value, ast.Name) and value.id == "SIMT_ONLY"
        )
    assert "SIMT_ONLY = 1073741824" in TABLE_SOURCE.read_text()


def test_shipped_table_is_the_good_state():
    """The decoder's projections never switch kernel between decode (m=1) and verify (m=k+1), k up to 7:
    each runs one kernel at every m (SIMT, or MMA for the CUDA config's MoE router)."""
    kernels_by_shape = {}
    for config in CONFIGS.values():
        for n, k in config.gemm_shapes().values():
            threshold = tiny_gemm.threshold_for(n, k)
            assert threshold.reason is Reason.TABLE
            used = {threshold.kernel_at(m) for m in range(1, 9)}
            assert len(used) == 1, (n, k, used)
            kernels_by_shape[(n, k)] = used.pop()
    assert kernels_by_shape[(896, 7168)] is Kernel.MMA
    assert kernels_by_shape[(144, 7168)] is kernels_by_shape[(1536, 128)] is Kernel.SIMT


def test_threshold_reasons(monkeypatch):
    monkeypatch.delenv(tiny_gemm.OVERRIDE_ENV, raising=False)
    assert tiny_gemm.threshold_for(144, 7168) == tiny_gemm.Threshold(SIMT_ONLY, Reason.TABLE)
    assert tiny_gemm.threshold_for(896, 7168) == tiny_gemm.Threshold(1, Reason.TABLE)
    assert tiny_gemm.threshold_for(256, 7168) == tiny_gemm.Threshold(8, Reason.TABLE)
    untabled = tiny_gemm.threshold_for(4096, 7168)
    assert untabled.reason is Reason.COST_MODEL
    assert untabled.mma_min_m == tiny_gemm.cost_model_mma_min_m(4096, 7168)
    monkeypatch.setenv(tiny_gemm.OVERRIDE_ENV, '{"896x7168": 2, "4096x7168": "simt"}')
    assert tiny_gemm.threshold_for(896, 7168) == tiny_gemm.Threshold(2, Reason.OVERRIDE)
    assert tiny_gemm.threshold_for(4096, 7168).pinned_simt
    assert tiny_gemm.threshold_for(144, 7168).reason is Reason.TABLE


def test_cost_model_prefers_mma_earlier_for_bigger_weights():
    small = tiny_gemm.cost_model_mma_min_m(64, 512)
    big = tiny_gemm.cost_model_mma_min_m(4096, 7168)
    assert 1 <= big <= small
    assert tiny_gemm.cost_model_mma_min_m(1, 16) == SIMT_ONLY


@pytest.mark.parametrize(
    "text", ["[1, 2]", "{", '{"896": 2}', '{"896x7168": 0}', '{"896x7168": true}', '{"896x7168": "mma"}']
)
def test_bad_overrides_are_rejected(text):
    with pytest.raises(ValueError, match=tiny_gemm.OVERRIDE_ENV):
        tiny_gemm.parse_override(text)


def _rows_vs_alone(n, k, m_max=8):
    """First m at which some row computed in a batch differs from the same row computed alone."""
    gen = torch.Generator().manual_seed(5)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(torch.bfloat16)
    x = torch.randn(m_max, k, generator=gen).to(torch.bfloat16)
    alone = torch.cat([tiny_gemm.tiny_gemm(x[i : i + 1], w, op="test", out_fp32=True) for i in range(m_max)])
    for m in range(2, m_max + 1):
        if not torch.equal(tiny_gemm.tiny_gemm(x[:m], w, op="test", out_fp32=True), alone[:m]):
            return m
    return None


@pytest.mark.parametrize(("n", "k"), [(144, 1024), (896, 1024), (1536, 128)])
def test_dispatcher_is_batch_variant_with_the_bad_table_and_invariant_with_the_good(monkeypatch, n, k):
    monkeypatch.setenv(tiny_gemm.OVERRIDE_ENV, BAD)
    assert _rows_vs_alone(n, k) == 2
    monkeypatch.setenv(tiny_gemm.OVERRIDE_ENV, json.dumps({f"{n}x{k}": 5}))
    assert _rows_vs_alone(n, k) == 5
    monkeypatch.delenv(tiny_gemm.OVERRIDE_ENV)
    assert _rows_vs_alone(n, k) is None


def test_trace_writes_each_distinct_decision_once(monkeypatch, tmp_path):
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(trace.TRACE_ENV, str(path))
    monkeypatch.setenv(tiny_gemm.OVERRIDE_ENV, '{"144x1024": 2}')
    w = torch.zeros(144, 1024, dtype=torch.bfloat16)
    for m in (1, 1, 4, 4, 1):
        tiny_gemm.tiny_gemm(torch.zeros(m, 1024, dtype=torch.bfloat16), w, op="kda_gate")
    tiny_gemm.tiny_gemm(
        torch.zeros(1, 1024, dtype=torch.bfloat16), torch.zeros(512, 1024, dtype=torch.bfloat16), op="lm_head"
    )
    rows = trace.read(path)
    assert rows == [
        {"op": "kda_gate", "N": 144, "K": 1024, "m": 1, "kernel": "simt", "reason": "override"},
        {"op": "kda_gate", "N": 144, "K": 1024, "m": 4, "kernel": "mma", "reason": "override"},
        {"op": "lm_head", "N": 512, "K": 1024, "m": 1, "kernel": "simt", "reason": "table"},
    ]


def test_trace_of_a_bench_run_names_table_and_kernels(tmp_path):
    path = tmp_path / "bench-trace.jsonl"
    env = {**os.environ, "KERNELS_DISPATCH_TRACE": str(path), "KERNELS_DISPATCH_OVERRIDE": BAD}
    code = (
        "import torch, dataclasses\n"
        "from bisector.kernels import model\n"
        "cfg = dataclasses.replace(model.CPU_CONFIG, prompts=1, rounds=1)\n"
        "model.measure_accept_length(model.Decoder(cfg, torch.device('cpu')), 3)\n"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=Path(tiny_gemm.__file__).parents[1])
    rows = trace.read(path)
    verify = {(r["op"], r["kernel"], r["reason"]) for r in rows if r["m"] == 4}
    decode = {(r["op"], r["kernel"], r["reason"]) for r in rows if r["m"] == 1}
    assert ("moe_router", "mma", "override") in verify
    assert ("moe_router", "simt", "override") in decode
    assert ("lm_head", "simt", "table") in verify
    assert len(rows) == len({json.dumps(r, sort_keys=True) for r in rows})


def test_backend_selection(monkeypatch):
    monkeypatch.delenv(tiny_gemm.BACKEND_ENV, raising=False)
    assert tiny_gemm.backend_for("cpu") == "cpu"
    monkeypatch.setenv(tiny_gemm.BACKEND_ENV, "cpu")
    assert tiny_gemm.backend_for("cuda") == "cpu"
    monkeypatch.setenv(tiny_gemm.BACKEND_ENV, "gpu")
    with pytest.raises(ValueError, match=tiny_gemm.BACKEND_ENV):
        tiny_gemm.backend_for("cpu")


def test_core_modules_do_not_import_torch():
    code = (
        "import sys, kernels.tiny_gemm, kernels.trace, kernels.demo\n"
        "print('torch' in sys.modules, 'triton' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(tiny_gemm.__file__).parents[1],
    )
    assert done.stdout.split() == ["False", "False"]
