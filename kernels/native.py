"""The decoder's one compiled piece: how many drafted tokens the verify pass accepts, in C where it was built.

The demo's build step (`build.sh`, written by kernels/demo_build.py) compiles `native/accept.c` into
`kernels/_accept.so` next to this file. Where that library is absent (no build, no C compiler) the same count
runs in Python, so the metric never depends on whether the build compiled it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

LIBRARY = Path(__file__).with_name("_accept.so")


def _load() -> ctypes.CDLL | None:
    try:
        library = ctypes.CDLL(str(LIBRARY))
    except OSError:
        return None
    library.accepted_prefix.argtypes = [ctypes.POINTER(ctypes.c_long), ctypes.POINTER(ctypes.c_long), ctypes.c_int]
    library.accepted_prefix.restype = ctypes.c_int
    return library


_LIBRARY = _load()
COMPILED = _LIBRARY is not None  # whether the count below runs in the built C library


def accepted_prefix(drafts: Sequence[int], predicted: Sequence[int], k: int) -> int:
    """The number of leading drafts (at most k) that equal the verify pass's predictions."""
    if _LIBRARY is None:
        accepted = 0
        while accepted < k and drafts[accepted] == predicted[accepted]:
            accepted += 1
        return accepted
    row = ctypes.c_long * k
    return int(_LIBRARY.accepted_prefix(row(*drafts[:k]), row(*predicted[:k]), k))
