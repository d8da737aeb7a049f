"""Runs the Triton kernels under TRITON_INTERPRET=1 on tiny shapes and prints one JSON line.

Not collected by pytest (no test_ prefix); test_kernels_triton.py runs it in a fresh process, because the
interpreter is chosen when triton.jit decorates the kernels.
"""

import json
import os

os.environ["TRITON_INTERPRET"] = "1"

import torch

from bisector.kernels import triton_gemm
from bisector.kernels.tiny_gemm import Kernel

CASES = [
    (48, 64, None),
    (40, 100, None),
    (48, 128, (16, 32, 2, 4, 1)),
    (40, 100, (16, 32, 3, 4, 1)),
    (48, 128, (16, 32, 2, 4, 1, 0, 4, 1)),  # SIMT row form, split K
    (40, 100, (8, 32, 3, 4, 1, 0, 8, 1)),  # SIMT row form, K not a multiple of the split
    (40, 100, (16, 128, 1, 4, 1, 0, 4, 1)),  # SIMT row form, one masked K block
    (40, 100, (8, 64, 2, 4, 1, 0, 8, 1)),  # SIMT row form, one K block per program, K not a multiple
    (40, 100, (8, 64, 2, 4, 1, 1, 8, 1)),  # SIMT row form, rows of x loaded ahead (rows past M masked)
]


def _without_weights_first(call):
    """call() with every program loading its weights inside its K loop (the path without WEIGHTS_FIRST)."""
    weights_first = triton_gemm._weights_first
    triton_gemm._weights_first = lambda *args: False
    try:
        return call()
    finally:
        triton_gemm._weights_first = weights_first


def _ran_weights_first(kernel, tiles, k):
    k_split = -(-k // (tiles.split_k * tiles.block_k)) * tiles.block_k
    return triton_gemm._weights_first(kernel, tiles, k_split, False)


def main():
    results = []
    gen = torch.Generator().manual_seed(0)
    for n, k, tiles in CASES:
        w = (torch.randn(n, k, generator=gen) * k**-0.5).to(torch.bfloat16)
        x = torch.randn(20, k, generator=gen).to(torch.bfloat16)
        ref = x.double() @ w.double().t()
        chosen = triton_gemm.Tiles(*tiles) if tiles else None
        for kernel in Kernel:
            if kernel is Kernel.MMA and chosen is not None and chosen.form:
                continue

            def run(rows, out_fp32=True, kernel=kernel, chosen=chosen, w=w):
                return triton_gemm.run(kernel, rows, w, out_fp32=out_fp32, tiles=chosen)

            full = run(x)
            bf16 = run(x, out_fp32=False)
            looped = _without_weights_first(lambda run=run, x=x: run(x))
            results.append(
                {
                    "shape": [n, k],
                    "tiles": tiles,
                    "kernel": str(kernel),
                    "rel_err": float((full.double() - ref).norm() / ref.norm()),
                    "rel_err_bf16": float((bf16.double() - ref).norm() / ref.norm()),
                    "bf16_dtype": str(bf16.dtype),
                    "invariant_by_m": all(torch.equal(run(x[:m]), full[:m]) for m in (1, 2, 5, 16, 17)),
                    "weights_first": _ran_weights_first(kernel, chosen or triton_gemm.tiles_for(kernel, n, k), k),
                    "same_bits_looped": torch.equal(looped, full),
                    "invariant_by_position": all(torch.equal(run(x[i : i + 1]), full[i : i + 1]) for i in (3, 19)),
                }
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
