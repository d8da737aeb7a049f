"""Bad input to the kernel stack's command lines: one line on stderr, exit 2."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bisector.kernels import bench

ROOT = Path(bench.__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

pytestmark = pytest.mark.kernels  # each test starts the stack's command line, importing torch

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, env=ENV, check=False, timeout=300
    )


def _one_line_refusal(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr
    assert done.stdout == ""


@cpu_only
def test_accept_length_on_cuda_without_cuda_is_one_line_and_exit_2():
    done = _run("bisector.kernels.bench", "accept-length", "--device", "cuda")
    _one_line_refusal(done, "--device cuda", "no CUDA device")


@cpu_only
def test_gemm_and_probe_refuse_cuda_without_cuda_the_same_way():
    _one_line_refusal(_run("bisector.kernels.bench", "gemm", "--device", "cuda"), "no CUDA device")
    _one_line_refusal(_run("bisector.kernels.probe", "batch-invariance", "--device", "cuda"), "no CUDA device")


def test_unknown_device_is_one_line_and_exit_2():
    _one_line_refusal(_run("bisector.kernels.bench", "accept-length", "--device", "tpu"), "expected auto, cpu, cuda")


@pytest.mark.parametrize("shape", ["12x", "x12", "12", "axb", "0x128"])
def test_malformed_probe_shape_is_one_line_and_exit_2(shape: str):
    _one_line_refusal(_run("bisector.kernels.probe", "batch-invariance", "--device", "cpu", "--shape", shape), "NxK")


def test_malformed_gemm_batch_sizes_and_config_values_are_one_line_and_exit_2():
    _one_line_refusal(_run("bisector.kernels.bench", "gemm", "--device", "cpu", "--m", "1,x"), "--m '1,x'")
    _one_line_refusal(_run("bisector.kernels.bench", "accept-length", "--set", "gain=abc"), "gain takes a float")
    _one_line_refusal(_run("bisector.kernels.bench", "accept-length", "--set", "colour=red"), "unknown config field")


@pytest.mark.parametrize("threads", ["0", "-3"])
def test_no_cpu_threads_is_one_line_and_exit_2(threads: str):
    for command in (("bisector.kernels.bench", "accept-length"), ("bisector.kernels.probe", "batch-invariance")):
        refused = _run(*command, "--device", "cpu", "--threads", threads)
        _one_line_refusal(refused, f"--threads {threads}", "expected a positive number of CPU threads")
