"""Input checks shared by the kernel stack's command lines.

Bad input (a device this machine lacks, a malformed shape or batch size, no CPU threads) raises ``KernelsInputError``;
``run_checked`` turns it into one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch

EXIT_BAD_INPUT = 2


class KernelsInputError(ValueError):
    """An argument the command cannot use; its message is the whole explanation."""


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA where available, else the CPU), ``cpu``, ``cuda`` or ``cuda:N`` present on this machine."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise KernelsInputError(f"--device {name!r}: expected auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise KernelsInputError(f"--device {name!r}: expected auto, cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise KernelsInputError(
                f"--device {name}: no CUDA device here (torch {torch.__version__}, CUDA available: no); "
                "use --device cpu or auto"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise KernelsInputError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def parse_shape(text: str) -> tuple[int, int]:
    """``NxK`` with two positive integers, e.g. ``144x7168``."""
    n, sep, k = text.lower().partition("x")
    if not sep or not n.isdigit() or not k.isdigit() or int(n) == 0 or int(k) == 0:
        raise KernelsInputError(f"--shape {text!r}: expected NxK with two positive integers, e.g. 144x7168")
    return int(n), int(k)


def parse_batch_sizes(text: str) -> list[int]:
    """A comma-separated list of positive batch sizes, e.g. ``1,2,4,8``."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise KernelsInputError(f"--m {text!r}: expected positive integers separated by commas, e.g. 1,2,4,8")
    return [int(p) for p in parts]


def check_threads(threads: int) -> int:
    """A --threads value: a positive number of torch CPU threads (torch itself fails on 0 or less)."""
    if threads < 1:
        raise KernelsInputError(f"--threads {threads}: expected a positive number of CPU threads")
    return threads


def run_checked(prog: str, command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run one parsed command; bad input becomes one line on stderr and exit status 2."""
    try:
        return int(command(args))
    except KernelsInputError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
