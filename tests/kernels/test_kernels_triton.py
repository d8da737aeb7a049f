"""The Triton kernels' logic under the interpreter (tiny shapes only: the interpreter is slow)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

pytestmark = [pytest.mark.kernels, pytest.mark.xdist_group("triton-interpreter")]  # one interpreter run

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="module")
def results():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(HERE / "triton_interpreter_check.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_kernels_are_correct(results):
    for row in results:
        assert row["rel_err"] < 1e-5, row
        assert row["rel_err_bf16"] < 1e-2, row
        assert row["bf16_dtype"] == "torch.bfloat16"


def test_kernels_are_batch_invariant_alone_including_split_k(results):
    assert all(row["invariant_by_m"] for row in results)
    assert any(row["tiles"] and row["tiles"][2] > 1 for row in results)


def test_simt_rows_do_not_depend_on_their_position(results):
    # (The interpreter's numpy dot for MMA is not position independent; on the GPU, gemm_bench checks both.)
    assert all(row["invariant_by_position"] for row in results if row["kernel"] == "simt")


def test_weights_loaded_first_give_the_same_bits_as_loaded_in_the_loop(results):
    # The PDL path (weights before griddepcontrol.wait) runs in the interpreter without the wait itself.
    assert all(row["same_bits_looped"] for row in results)
    ran = {row["kernel"] for row in results if row["weights_first"]}
    assert ran == {"simt", "mma"}, ran
