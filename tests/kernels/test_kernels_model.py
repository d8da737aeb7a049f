"""The self-speculative decoder: exactly k + 1 with batch-invariant dispatch, clearly less with the bad table."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bisector.kernels import model, tiny_gemm

ROOT = Path(model.__file__).resolve().parents[1]
BAD = json.dumps({"144x1024": 2, "896x1024": 2, "1536x128": 2})


def _bench(*args, override=""):
    env = {**os.environ, tiny_gemm.OVERRIDE_ENV: override}
    done = subprocess.run(
        [sys.executable, "-m", "bisector.kernels.bench", "accept-length", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()[:2]
    return first, json.loads(second)


@pytest.mark.kernels
def test_bench_gives_exactly_k_plus_one_with_the_good_table():
    line, report = _bench("--k", "3")
    assert line == "accept length: 4.0000"
    assert report["accept_length"] == 4.0
    assert report["histogram"] == [0, 0, 0, report["rounds"]]
    assert report["device"].startswith("cpu")
    assert report["backend"] == "cpu"
    assert report["config"]["name"] == "cpu"
    assert {row["op"]: (row["decode"], row["verify"]) for row in report["dispatch"]} == {
        "kda_gate": ("simt", "simt"),
        "moe_router": ("simt", "simt"),
        "kda_out": ("simt", "simt"),
        "lm_head": ("simt", "simt"),
    }
    assert report["wall_s"] > 0


@pytest.mark.kernels
def test_bench_drops_clearly_below_the_threshold_with_the_bad_table():
    line, report = _bench("--k", "3", override=BAD)
    assert line.startswith("accept length: ")
    assert report["accept_length"] < 3.8
    assert report["accept_length"] == float(line.split(": ")[1])
    router = next(row for row in report["dispatch"] if row["op"] == "moe_router")
    assert (router["mma_min_m"], router["reason"], router["decode"], router["verify"]) == (2, "override", "simt", "mma")


def _small(**changes):
    return dataclasses.replace(model.CPU_CONFIG, prompts=4, rounds=3, **changes)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_accept_length_is_k_plus_one_for_any_k_with_invariant_dispatch(monkeypatch, k):
    monkeypatch.delenv(tiny_gemm.OVERRIDE_ENV, raising=False)
    result = model.measure_accept_length(model.Decoder(_small(), torch.device("cpu")), k)
    assert result.accept_length == k + 1
    assert result.histogram[-1] == result.rounds


def test_bad_table_result_is_bitwise_repeatable(monkeypatch):
    monkeypatch.setenv(tiny_gemm.OVERRIDE_ENV, BAD)
    decoder = model.Decoder(_small(), torch.device("cpu"))
    first = model.measure_accept_length(decoder, 3)
    again = model.measure_accept_length(model.Decoder(_small(), torch.device("cpu")), 3)
    assert (first.accept_length, first.histogram) == (again.accept_length, again.histogram)
    assert first.accept_length < 4.0


def test_forward_is_batch_invariant_with_the_good_table(monkeypatch):
    monkeypatch.delenv(tiny_gemm.OVERRIDE_ENV, raising=False)
    decoder = model.Decoder(_small(), torch.device("cpu"))
    tokens = [3, 141, 59, 26, 5]
    with torch.inference_mode():
        logits, states = decoder.forward(tokens, decoder.initial_state())
        state = decoder.initial_state()
        for i, token in enumerate(tokens):
            one, after = decoder.forward([token], state)
            assert torch.equal(one[0], logits[i])
            assert torch.equal(after[0], states[i])
            state = after[0]


def test_activations_use_exact_ops():
    x = torch.tensor([-6.0, -2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0])
    assert model.fold(x).tolist() == [-1.0, -1.0, 0.0, 1.0, 0.5, 0.0, -1.0, 0.0, 1.0]
    assert model.softsign(torch.tensor([1.0, -3.0])).tolist() == [0.5, -0.75]
    h = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    n = model.rms_norm(h)
    assert n.dtype == torch.bfloat16
    assert torch.allclose(n.float().pow(2).mean(-1), torch.ones(3), rtol=2e-2)


def test_set_changes_config_fields():
    from bisector.kernels import bench

    config = bench._config("cpu", torch.device("cpu"), ["layers=2", "gain=1.5"])
    assert (config.layers, config.gain) == (2, 1.5)
    from bisector.kernels.cli_input import KernelsInputError

    with pytest.raises(KernelsInputError, match="unknown config field 'nope'"):
        bench._config("cpu", torch.device("cpu"), ["nope=1"])
