"""Tiny GEMM y = x @ W^T for small m: the per-shape SIMT/MMA dispatch table, its cost model and the entry point.

Both kernels are batch invariant on their own (a row's output is bitwise the same for any m), but the
dispatcher switches from SIMT to MMA at a per-(N, K) batch size, so a row's result depends on m through the
switch. A shape whose threshold is at or below k + 1 makes bs=1 decode (m = 1) and speculative verify
(m = k + 1) round the same token differently.

No torch at module level: the core reads the table and the decisions without the ``kernels`` extra.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from . import trace
from .kernel_kind import Kernel

if TYPE_CHECKING:
    import torch

# Threshold meaning "MMA never": the shape is pinned to the SIMT kernel at every m.
SIMT_ONLY = 1073741824

# MMA from this m upward, per (N, K) of W (N output features, K reduction). One row per line, a plain
# literal: `bisect` diffs this table between commits statically.
# A row is batch invariant when the decoder's m range (decode m = 1 up to verify m = k + 1) falls on one side
# of it: SIMT_ONLY, or 1 (MMA at every m), or above k + 1. Tune per shape, never per m.
_TUNED_MMA_MIN_M: dict[tuple[int, int], int] = {
    (128, 512): SIMT_ONLY,  # beam-search scorer
    (144, 1024): SIMT_ONLY,  # demo decoder, CPU config: KDA gate
    (144, 7168): SIMT_ONLY,  # Kimi-K3 KDA gate
    (256, 7168): 8,  # DeepSeek-V3 router
    (384, 7168): 8,  # DeepSeek-V4.1 router
    (512, 1024): SIMT_ONLY,  # demo decoder, CPU config: LM head
    (896, 1024): SIMT_ONLY,  # demo decoder, CPU config: MoE router
    (896, 7168): 1,  # Kimi-K3 MoE router: MMA at every m (faster than SIMT from m = 2 on H200)
    (1536, 128): SIMT_ONLY,  # Kimi-K3 KDA output up-projection
    (2048, 7168): SIMT_ONLY,  # demo decoder, CUDA config: LM head
}

OVERRIDE_ENV = "KERNELS_DISPATCH_OVERRIDE"

# Cost model for shapes without a table row (H200-like rates, per microsecond).
_HBM_BYTES_PER_US = 4.0e6
_SIMT_FMA_PER_US = 2.0e7
_MMA_FMA_PER_US = 4.0e8
_MMA_SETUP_US = 1.0
_MMA_TILE_M = 16
_COST_MODEL_MAX_M = 64


class Reason(StrEnum):
    TABLE = "table"  # a row of _TUNED_MMA_MIN_M
    COST_MODEL = "cost_model"  # no row: the cost model picked the threshold
    OVERRIDE = "override"  # KERNELS_DISPATCH_OVERRIDE forced the row


@dataclass(frozen=True)
class Threshold:
    """Where one (N, K) switches to MMA, and why."""

    mma_min_m: int
    reason: Reason

    @property
    def pinned_simt(self) -> bool:
        return self.mma_min_m >= SIMT_ONLY

    def kernel_at(self, m: int) -> Kernel:
        return Kernel.MMA if m >= self.mma_min_m else Kernel.SIMT


@dataclass(frozen=True)
class Decision:
    """One dispatch decision, as written to the dispatch trace."""

    op: str
    n: int
    k: int
    m: int
    kernel: Kernel
    reason: Reason

    def to_json(self) -> dict[str, object]:
        return {
            "op": self.op,
            "N": self.n,
            "K": self.k,
            "m": self.m,
            "kernel": str(self.kernel),
            "reason": str(self.reason),
        }


def tuned_table() -> dict[tuple[int, int], int]:
    """A copy of the tuning table as this commit ships it (no overrides applied)."""
    return dict(_TUNED_MMA_MIN_M)


def cost_model_mma_min_m(n: int, k: int) -> int:
    """Smallest m at which the MMA kernel is predicted faster than SIMT; SIMT_ONLY if none up to 64.

    Both kernels stream the weights once; SIMT pays m * N * K FMAs on CUDA cores, MMA pays a fixed setup and
    the FMAs of whole 16-row tiles on tensor cores.
    """
    stream_us = 2 * n * k / _HBM_BYTES_PER_US
    for m in range(1, _COST_MODEL_MAX_M + 1):
        simt_us = stream_us + m * n * k / _SIMT_FMA_PER_US
        mma_tiles = math.ceil(m / _MMA_TILE_M)
        mma_us = _MMA_SETUP_US + stream_us + mma_tiles * _MMA_TILE_M * n * k / _MMA_FMA_PER_US
        if mma_us <= simt_us:
            return m
    return SIMT_ONLY


def parse_override(text: str) -> dict[tuple[int, int], int]:
    """Parse KERNELS_DISPATCH_OVERRIDE: a JSON object {"NxK": threshold}, threshold an int >= 1 or "simt".

    Example: '{"144x7168": 2, "896x7168": "simt"}'. Blank text means no override.
    """
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{OVERRIDE_ENV} is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f'{OVERRIDE_ENV} must be a JSON object like {{"144x7168": 2}}')
    rows: dict[tuple[int, int], int] = {}
    for key, value in raw.items():
        parts = str(key).lower().split("x")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"{OVERRIDE_ENV}: key {key!r} is not 'NxK'")
        if value == "simt":
            threshold = SIMT_ONLY
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            threshold = value
        else:
            raise ValueError(f"{OVERRIDE_ENV}: value for {key!r} must be an int >= 1 or 'simt'")
        rows[(int(parts[0]), int(parts[1]))] = threshold
    return rows


_override_cache: tuple[str, dict[tuple[int, int], int]] = ("", {})


def override_rows() -> dict[tuple[int, int], int]:
    """The rows that KERNELS_DISPATCH_OVERRIDE forces in this process (parsed once per distinct value)."""
    global _override_cache
    text = os.environ.get(OVERRIDE_ENV, "")
    if text != _override_cache[0]:
        _override_cache = (text, parse_override(text))
    return _override_cache[1]


def threshold_for(n: int, k: int) -> Threshold:
    """The MMA threshold for W of shape (n, k): override, else table row, else cost model."""
    forced = override_rows().get((n, k))
    if forced is not None:
        return Threshold(forced, Reason.OVERRIDE)
    tuned = _TUNED_MMA_MIN_M.get((n, k))
    if tuned is not None:
        return Threshold(tuned, Reason.TABLE)
    return Threshold(cost_model_mma_min_m(n, k), Reason.COST_MODEL)


def decide(op: str, n: int, k: int, m: int) -> Decision:
    """The kernel for an (m x k) @ (n x k)^T product, recorded in the dispatch trace if one is enabled."""
    threshold = threshold_for(n, k)
    decision = Decision(op, n, k, m, threshold.kernel_at(m), threshold.reason)
    trace.record(decision.to_json())
    return decision


def tiny_gemm(x: torch.Tensor, w: torch.Tensor, *, op: str, out_fp32: bool = False) -> torch.Tensor:
    """y = x @ w^T with bf16 x (m, K) and w (N, K), fp32 accumulation, bf16 output (fp32 if out_fp32).

    Runs the Triton kernel on CUDA when Triton is importable, the CPU twin otherwise (see cpu_gemm).
    """
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"tiny_gemm({op}): shapes {tuple(x.shape)} and {tuple(w.shape)} do not multiply")
    decision = decide(op, w.shape[0], w.shape[1], x.shape[0])
    return run_kernel(decision.kernel, x, w, out_fp32=out_fp32)


def run_kernel(kernel: Kernel, x: torch.Tensor, w: torch.Tensor, *, out_fp32: bool = False) -> torch.Tensor:
    """Run one kernel regardless of the table (the probe and the tests compare kernels this way)."""
    if backend_for(x.device.type) == "triton":
        from . import triton_gemm

        return triton_gemm.run(kernel, x, w, out_fp32=out_fp32)
    from . import cpu_gemm

    return cpu_gemm.run(kernel, x, w, out_fp32=out_fp32)


BACKEND_ENV = "KERNELS_BACKEND"


def backend_for(device_type: str) -> str:
    """'triton' on CUDA when Triton imports, else 'cpu' (the torch twins); KERNELS_BACKEND=cpu|triton forces.

    Forcing 'triton' on CPU tensors needs TRITON_INTERPRET=1 (tiny shapes only: the interpreter is slow).
    """
    wanted = os.environ.get(BACKEND_ENV, "auto")
    if wanted not in ("auto", "cpu", "triton"):
        raise ValueError(f"{BACKEND_ENV} must be auto, cpu or triton, not {wanted!r}")
    if wanted == "cpu" or (wanted == "auto" and device_type != "cuda"):
        return "cpu"
    if wanted == "auto" and not _triton_importable():
        return "cpu"
    return "triton"


@functools.cache
def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
