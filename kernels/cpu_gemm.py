"""CPU twins of the two tiny GEMM kernels, with the same structure as the Triton ones.

Both are built from elementwise torch ops only (multiply, add, halving), never from a library reduction
(matmul, sum) whose blocking may depend on the batch: a plain fp32 ``torch.matmul`` on CPU is itself batch
variant (gemv for m = 1, gemm above). Every output element therefore goes through a sequence of IEEE
operations fixed by (N, K) alone, and each twin is batch invariant by construction. They run on any torch
device (on CUDA they are the fallback when Triton is missing).

- SIMT: like the kernel's lanes, lane l of each output accumulates the products k = l, l + 128, ... in K
  order (fp32, round to nearest), then the 128 lane sums are tree-summed (the kernel's ``tl.sum``).
- MMA: the K axis in 16-wide k-tiles (one ``mma.sync`` k-step); each tile's products summed, then added into
  the fp32 accumulator tile after tile with round-toward-zero, as tensor cores truncate their accumulation;
  long K is split into runs of at most 64 tiles whose partial sums are added in split order. The different
  order and the truncation make its bf16 outputs differ from SIMT's in a fraction of a percent of elements.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from .fixed_order import next_pow2, tree_sum
from .kernel_kind import Kernel

SIMT_LANES = 128
MMA_TILE_K = 16
MMA_TILES_PER_SPLIT = 64
_CHUNK_ELEMENTS = 1 << 19

# Clearing the low 29 mantissa bits of a float64 truncates it toward zero to float32's 24 bits.
_RZ_MASK = ~((1 << 29) - 1)


def run(kernel: Kernel, x: torch.Tensor, w: torch.Tensor, *, out_fp32: bool = False) -> torch.Tensor:
    """y = x @ w^T through one twin; x (m, K) and w (N, K) bf16; bf16 out unless out_fp32."""
    acc = simt_fp32(x, w) if kernel is Kernel.SIMT else mma_fp32(x, w)
    return acc if out_fp32 else acc.to(torch.bfloat16)


def _block_sums(x: torch.Tensor, w: torch.Tensor, block: int, blocks: int) -> torch.Tensor:
    """(m, N, blocks) fp32: each block of `block` consecutive products x[i, k] * w[j, k] tree-summed.

    The products are exact for bf16 inputs; K is zero-padded to blocks * block. Output columns are computed
    in chunks so the product tensor stays cache-sized: columns are independent, so the chunking (which
    depends on m) changes no arithmetic.
    """
    m, k = x.shape
    n = w.shape[0]
    k_padded = blocks * block
    xf = x.to(torch.float32)
    if k_padded != k:
        xf = torch.nn.functional.pad(xf, (0, k_padded - k))
    cols = max(1, _CHUNK_ELEMENTS // max(1, m * k_padded))
    out = []
    w_all = _weight_fp32(w)
    for j in range(0, n, cols):
        wf = w_all[j : j + cols]
        if k_padded != k:
            wf = torch.nn.functional.pad(wf, (0, k_padded - k))
        products = xf[:, None, :] * wf[None, :, :]
        out.append(tree_sum(products.view(m, wf.shape[0], blocks, block)))
    return out[0] if len(out) == 1 else torch.cat(out, dim=1)


_weight_cache: dict[int, tuple[weakref.ref[torch.Tensor], int, torch.Tensor]] = {}


def _weight_fp32(w: torch.Tensor) -> torch.Tensor:
    """w in fp32 (exact), cached per weight tensor while it lives and is not modified in place."""
    key = id(w)
    hit = _weight_cache.get(key)
    if hit is not None and hit[0]() is w and hit[1] == w._version:
        return hit[2]
    wf = w.to(torch.float32)
    _weight_cache[key] = (weakref.ref(w, _forget(key)), w._version, wf)
    return wf


def _forget(key: int) -> Callable[[weakref.ref[torch.Tensor]], None]:
    def drop(_ref: weakref.ref[torch.Tensor]) -> None:
        _weight_cache.pop(key, None)

    return drop


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
    if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
        raise TypeError(f"tiny GEMM takes bf16 inputs, got {x.dtype} and {w.dtype}")


def simt_fp32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """SIMT twin, fp32 accumulator (m, N).

    Like a warp's lanes: lane l of each output accumulates the products k = l, l + L, l + 2L, ... in K order,
    then the L lane sums are tree-summed (the kernel's ``tl.sum``).
    """
    _check(x, w)
    k = x.shape[1]
    lanes = min(SIMT_LANES, next_pow2(k))
    k_padded = -(-k // lanes) * lanes
    xf = x.to(torch.float32)
    wf = _weight_fp32(w)
    if k_padded != k:
        xf = torch.nn.functional.pad(xf, (0, k_padded - k))
        wf = torch.nn.functional.pad(wf, (0, k_padded - k))
    acc = xf[:, None, 0:lanes] * wf[None, :, 0:lanes]
    product = torch.empty_like(acc)
    for start in range(lanes, k_padded, lanes):
        torch.mul(xf[:, None, start : start + lanes], wf[None, :, start : start + lanes], out=product)
        acc.add_(product)
    return tree_sum(acc).contiguous()


def _round_toward_zero(v: torch.Tensor) -> torch.Tensor:
    """float64 values truncated to float32 precision (still float64: exact when converted)."""
    return (v.view(torch.int64) & _RZ_MASK).view(torch.float64)


def mma_fp32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """MMA twin, fp32 accumulator (m, N)."""
    _check(x, w)
    m, k = x.shape
    n = w.shape[0]
    tiles = -(-k // MMA_TILE_K)
    splits = -(-tiles // MMA_TILES_PER_SPLIT)
    per_split = -(-tiles // splits)
    tile_sums = _block_sums(x, w, MMA_TILE_K, splits * per_split).to(torch.float64)
    tile_sums = tile_sums.view(m, n, splits, per_split)
    acc = _round_toward_zero(tile_sums[..., 0])
    for t in range(1, per_split):
        acc = _round_toward_zero(acc + tile_sums[..., t])
    partial = acc.to(torch.float32)
    out = partial[..., 0]
    for s in range(1, splits):
        out = out + partial[..., s]
    return out.contiguous()
