"""The two kernels of the tiny GEMM: the dispatcher (tiny_gemm.py) picks one per shape, the backends run them."""

from enum import StrEnum


class Kernel(StrEnum):
    SIMT = "simt"  # CUDA-core FMAs, one fixed-order reduction per row; no tl.dot
    MMA = "mma"  # tensor-core tl.dot, rows padded to the 16-row MMA tile
