"""Reductions in a fixed order, built from elementwise ops, for any torch device.

Library reductions (``sum``, ``mean``, ``matmul``) pick their blocking from the whole tensor's shape, so a
row's result can change with the number of rows: torch's own ``(h * h).mean(-1)`` is batch variant on the
GPU. These helpers only ever add whole tensors elementwise, so each output's sequence of IEEE additions is
fixed by the reduced length alone.
"""

from __future__ import annotations

import torch

ROW_BLOCK = 1024


def tree_sum(p: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis, whose length is a power of two, by halving: (a0 + a_h) + ... in a fixed order."""
    length = p.shape[-1]
    if length & (length - 1):
        raise ValueError(f"tree_sum needs a power-of-two axis, got {length}")
    while length > 1:
        length //= 2
        p = p[..., :length] + p[..., length:]
    return p[..., 0]


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis of a 2-D tensor: blocks of up to 1024 tree-summed, block sums added in order."""
    rows, length = x.shape
    block = min(ROW_BLOCK, next_pow2(length))
    blocks = -(-length // block)
    if blocks * block != length:
        x = torch.nn.functional.pad(x, (0, blocks * block - length))
    sums = tree_sum(x.reshape(rows, blocks, block))
    total = sums[:, 0]
    for j in range(1, blocks):
        total = total + sums[:, j]
    return total
