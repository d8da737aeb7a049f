"""Host side of the Triton tiny GEMM: tile sizes per (N, K) and the launch.

Tile sizes are numerics: the K split and the reduction blocking decide the order of the fp32 additions. They
are fixed per shape and never depend on m (no autotuning keyed on m), or a kernel would stop being batch
invariant on its own. On H200 the weights of a K = 7168 projection take microseconds to stream, so the
tiles aim at enough programs to keep all 132 SMs loading (split-K where N alone gives too few).

KERNELS_TRITON_TILES (JSON, for tuning experiments) replaces rows, e.g.
``{"simt": {"896x7168": [16, 128, 2, 4, 3]}}`` as [block_n, block_k, split_k, num_warps, num_stages, prefetch,
block_m, form] (trailing fields optional).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

import torch
import triton

from . import triton_kernels
from .fixed_order import next_pow2
from .kernel_kind import Kernel

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
TILES_ENV = "KERNELS_TRITON_TILES"
PDL_ENV = "KERNELS_PDL"  # "0": launch without programmatic dependent launch (the lone-call timing)
_MMA_TILES_HELD = 8  # the most K blocks an MMA program loads before its first dot (registers)

SIMT_BLOCK_M = 4
FORM_LANES, FORM_ROWS = 0, 1  # Tiles.form of a SIMT kernel
MMA_BLOCK_M = 16
_TARGET_PROGRAMS = 128


@dataclass(frozen=True)
class Tiles:
    block_n: int
    block_k: int
    split_k: int
    num_warps: int = 4
    num_stages: int = 3
    prefetch: int = 1  # SIMT: load ahead (lanes form: the next K block; row form: every row of x) before the FMAs
    block_m: int = 0  # rows of x per program; 0: the kernel's default (SIMT 4, MMA 16)
    form: int = FORM_LANES  # SIMT only: FORM_LANES (simt_gemm_kernel) or FORM_ROWS (simt_rows_gemm_kernel)

    def to_list(self) -> list[int]:
        return [
            self.block_n,
            self.block_k,
            self.split_k,
            self.num_warps,
            self.num_stages,
            self.prefetch,
            self.block_m,
            self.form,
        ]

    def rows_per_program(self, kernel: Kernel) -> int:
        if self.block_m:
            return self.block_m
        return SIMT_BLOCK_M if kernel is Kernel.SIMT else MMA_BLOCK_M


# Chosen from `python -m kernels.bench gemm --sweep` runs (CUDA-graph timing) on one H200, 2026-11-29, and one
# H100, 2026-12-07, among tiles that keep these numerics (docs/benchmarks.md, "Tiny GEMM under CUDA graphs");
# other shapes get default_tiles.
SIMT_TILES: dict[tuple[int, int], Tiles] = {
    (144, 7168): Tiles(16, 256, 28, 4, 1, 1, 4, FORM_ROWS),
    (896, 7168): Tiles(4, 1024, 7, 1, 1, 0, 8, FORM_ROWS),
    (1536, 128): Tiles(4, 128, 1, 1, 1, 0, 4, FORM_LANES),
}
MMA_TILES: dict[tuple[int, int], Tiles] = {
    (144, 7168): Tiles(16, 256, 14, num_warps=2, num_stages=2),
    (896, 7168): Tiles(32, 512, 14, num_stages=1),
    (1536, 128): Tiles(16, 128, 1, num_stages=1),
}


def default_tiles(kernel: Kernel, n: int, k: int) -> Tiles:
    """Tiles for a shape without a row: a deterministic function of (N, K) only."""
    block_k = max(16, min(128, next_pow2(k)))
    block_n = 16 if kernel is Kernel.SIMT or n < 1024 else 32
    n_tiles = -(-n // block_n)
    split = 1
    while n_tiles * split * 2 <= _TARGET_PROGRAMS and k >= block_k * split * 2 * 4:
        split *= 2
    return Tiles(block_n, block_k, split)


@functools.cache
def _parse_tiles(text: str) -> dict[str, dict[tuple[int, int], Tiles]]:
    rows: dict[str, dict[tuple[int, int], Tiles]] = {}
    if not text.strip():
        return rows
    for kernel_name, shapes in json.loads(text).items():
        for key, values in shapes.items():
            n, k = (int(v) for v in key.lower().split("x"))
            rows.setdefault(kernel_name, {})[(n, k)] = Tiles(*(int(v) for v in values))
    return rows


def _env_tiles() -> dict[str, dict[tuple[int, int], Tiles]]:
    return _parse_tiles(os.environ.get(TILES_ENV, ""))


def tiles_for(kernel: Kernel, n: int, k: int) -> Tiles:
    forced = _env_tiles().get(str(kernel), {}).get((n, k))
    if forced is not None:
        return forced
    table = SIMT_TILES if kernel is Kernel.SIMT else MMA_TILES
    return table.get((n, k)) or default_tiles(kernel, n, k)


_counters: dict[torch.device, torch.Tensor] = {}


def _arrival_counters(device: torch.device, count: int) -> torch.Tensor:
    """Zeroed int32 arrival counters for split-K tiles; the last program of a tile resets its counter, so one
    buffer per device serves every launch on a stream."""
    have = _counters.get(device)
    if have is None or have.numel() < count:
        have = torch.zeros(max(count, 4096), dtype=torch.int32, device=device)
        _counters[device] = have
    return have


@functools.cache
def _pdl_capable(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device)[0] >= 9


def uses_pdl(device: torch.device) -> bool:
    """Whether the kernels launch with programmatic dependent launch here: CUDA on Hopper or later, unless
    KERNELS_PDL=0."""
    return device.type == "cuda" and not INTERPRET and os.environ.get(PDL_ENV, "1") != "0" and _pdl_capable(device)


def _weights_first(kernel: Kernel, tiles: Tiles, k_split: int, pdl: bool) -> bool:
    """Load a program's weights before anything else: under PDL, and in the interpreter (so that the CPU tests
    run the same code), where a program's K blocks are few (one for SIMT)."""
    blocks = k_split // tiles.block_k
    fits = blocks == 1 if kernel is Kernel.SIMT else blocks <= _MMA_TILES_HELD
    return fits and (pdl or INTERPRET)


def launch_mode(kernel: Kernel, tiles: Tiles, k_split: int, pdl: bool) -> tuple[bool, bool]:
    """(weights first, programmatic dependent launch). Only a kernel that loads its weights first waits for the
    previous one (griddepcontrol.wait) before it reads x or writes: any other launched that way would race it."""
    weights_first = _weights_first(kernel, tiles, k_split, pdl)
    return weights_first, pdl and weights_first


def run(
    kernel: Kernel, x: torch.Tensor, w: torch.Tensor, *, out_fp32: bool = False, tiles: Tiles | None = None
) -> torch.Tensor:
    """y = x @ w^T with one Triton kernel; x (m, K) and w (N, K) bf16; bf16 out unless out_fp32.

    ``tiles`` replaces the shape's tiles (the tile sweep uses it).
    """
    if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
        raise TypeError(f"tiny GEMM takes bf16 inputs, got {x.dtype} and {w.dtype}")
    m, k = x.shape
    n = w.shape[0]
    tiles = tiles or tiles_for(kernel, n, k)
    block_m = tiles.rows_per_program(kernel)
    # A fresh contiguous copy if needed: Triton specializes on pointer alignment, and a different
    # specialization could lay the reduction out differently.
    if not x.is_contiguous() or x.data_ptr() % 16:
        x = x.clone(memory_format=torch.contiguous_format)
    w = w.contiguous()
    y = torch.empty((m, n), dtype=torch.float32 if out_fp32 else torch.bfloat16, device=x.device)
    n_tiles, m_tiles = -(-n // tiles.block_n), -(-m // block_m)
    k_split = -(-k // (tiles.split_k * tiles.block_k)) * tiles.block_k
    even_k = k_split * tiles.split_k == k
    if tiles.split_k > 1:
        workspace = torch.empty(
            m_tiles * n_tiles * tiles.split_k * block_m * tiles.block_n, dtype=torch.float32, device=x.device
        )
        counters = _arrival_counters(x.device, m_tiles * n_tiles)
    else:
        workspace = y
        counters = _arrival_counters(x.device, 1)
    grid = (n_tiles, tiles.split_k, m_tiles)
    weights_first, dependent = launch_mode(kernel, tiles, k_split, uses_pdl(x.device))
    common = {
        "WEIGHTS_FIRST": weights_first,
        "GDC": dependent,
        "launch_pdl": dependent,
        "BLOCK_M": block_m,
        "BLOCK_N": tiles.block_n,
        "BLOCK_K": tiles.block_k,
        "SPLIT_K": tiles.split_k,
        "EVEN_K": even_k,
        "num_warps": tiles.num_warps,
        "num_stages": tiles.num_stages,
    }
    args = (x, w, y, workspace, counters, m, n, k)
    strides = {"stride_xm": x.stride(0), "stride_wn": w.stride(0), "stride_ym": y.stride(0), "K_SPLIT": k_split}
    if kernel is Kernel.SIMT and tiles.form == FORM_ROWS:
        triton_kernels.simt_rows_gemm_kernel[grid](*args, **strides, PREFETCH=bool(tiles.prefetch), **common)
    elif kernel is Kernel.SIMT:
        triton_kernels.simt_gemm_kernel[grid](*args, **strides, PREFETCH=bool(tiles.prefetch), **common)
    else:
        triton_kernels.mma_gemm_kernel[grid](*args, **strides, DOT_FP32=INTERPRET, **common)
    return y


def triton_version() -> str:
    return str(triton.__version__)
