"""The CPU twins: each batch invariant on its own, both correct, and different from each other."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bisector.kernels import cpu_gemm
from bisector.kernels.fixed_order import row_sum, tree_sum
from bisector.kernels.tiny_gemm import Kernel

SHAPES = [(144, 1024), (896, 1024), (1536, 128), (40, 100)]


def _inputs(n, k, rows=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(torch.bfloat16)
    x = torch.randn(rows, k, generator=gen).to(torch.bfloat16)
    return x, w


@pytest.mark.parametrize("kernel", list(Kernel))
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_each_kernel_is_batch_invariant_alone(kernel, n, k):
    x, w = _inputs(n, k)
    full = cpu_gemm.run(kernel, x, w, out_fp32=True)
    for m in range(1, 17):
        assert torch.equal(cpu_gemm.run(kernel, x[:m], w, out_fp32=True), full[:m]), f"m={m}"
    for i in range(16):
        assert torch.equal(cpu_gemm.run(kernel, x[i : i + 1], w, out_fp32=True), full[i : i + 1]), f"row {i}"
    assert torch.equal(cpu_gemm.run(kernel, x[:3], w), full[:3].to(torch.bfloat16))


@pytest.mark.parametrize("kernel", list(Kernel))
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_kernels_agree_with_the_reference_within_bf16_tolerance(kernel, n, k):
    x, w = _inputs(n, k, seed=1)
    ref = x.double() @ w.double().t()
    acc = cpu_gemm.run(kernel, x, w, out_fp32=True).double()
    out = cpu_gemm.run(kernel, x, w)
    assert out.dtype == torch.bfloat16
    assert float((acc - ref).norm() / ref.norm()) < 1e-5
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2
    torch.testing.assert_close(out.float(), ref.float(), rtol=1.6e-2, atol=1e-2)


def test_simt_and_mma_round_some_outputs_differently():
    x, w = _inputs(896, 1024, rows=64, seed=2)
    simt = cpu_gemm.run(Kernel.SIMT, x, w)
    mma = cpu_gemm.run(Kernel.MMA, x, w)
    differ = float((simt != mma).float().mean())
    assert 0 < differ < 0.01
    assert not torch.equal(
        cpu_gemm.run(Kernel.SIMT, x, w, out_fp32=True), cpu_gemm.run(Kernel.MMA, x, w, out_fp32=True)
    )


def test_rejects_non_bf16_inputs():
    x, w = _inputs(16, 32)
    with pytest.raises(TypeError):
        cpu_gemm.run(Kernel.SIMT, x.float(), w)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 48),
    k=st.integers(1, 300),
    m=st.integers(1, 12),
    row=st.integers(0, 11),
    kernel=st.sampled_from(list(Kernel)),
)
def test_batch_invariance_holds_for_any_shape(n, k, m, row, kernel):
    x, w = _inputs(n, k, rows=12, seed=n * 1000 + k)
    batch = cpu_gemm.run(kernel, x[:m], w, out_fp32=True)
    alone = cpu_gemm.run(kernel, x[row : row + 1], w, out_fp32=True)
    if row < m:
        assert torch.equal(batch[row : row + 1], alone)
    full = cpu_gemm.run(kernel, x, w, out_fp32=True)
    assert torch.equal(full[row : row + 1], alone)


def test_fixed_order_sums_are_batch_invariant():
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(9, 7168, generator=gen)
    full = row_sum(h)
    for m in (1, 4, 9):
        assert torch.equal(row_sum(h[:m]), full[:m])
    assert torch.allclose(full.double(), h.double().sum(-1), rtol=1e-5)
    assert float(tree_sum(torch.arange(8.0))) == 28.0
    with pytest.raises(ValueError, match="power-of-two"):
        tree_sum(torch.ones(6))
