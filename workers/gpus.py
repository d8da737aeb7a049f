"""Which GPUs this host offers to bisect steps, and how they are split into worker slots."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from bisector.vocab.errors import InputError


def visible_gpus() -> tuple[int, ...]:
    """GPU ids for worker slots: $BISECT_GPUS ("0,1,2" or "" for none), else $CUDA_VISIBLE_DEVICES,
    else what nvidia-smi lists. A host without GPUs gets CPU slots."""
    for variable in ("BISECT_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(variable)
        if value is not None:
            return _parse_ids(variable, value)
    return _listed_gpus()


@functools.cache
def _listed_gpus() -> tuple[int, ...]:
    """What nvidia-smi lists, asked once per process (it takes up to a second on a GPU host)."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if listing.returncode != 0:
        return ()
    return tuple(range(sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))))


def _parse_ids(variable: str, value: str) -> tuple[int, ...]:
    ids = [part.strip() for part in value.split(",") if part.strip()]
    if not all(part.isdigit() for part in ids):
        raise InputError(f"${variable}={value!r}: expected comma-separated GPU indices such as 0,1,2")
    return tuple(int(part) for part in ids)


def gpus_per_slot(available: tuple[int, ...], gpus_per_step: int | None) -> int:
    """The GPUs each slot gets: gpus_per_step (0: none, whatever the host has), or by default (None) one where
    the host shows GPUs, else none (CPU slots)."""
    if gpus_per_step is None:
        return 1 if available else 0
    return gpus_per_step


def split_gpus(available: tuple[int, ...], workers: int, gpus_per_step: int | None) -> list[tuple[int, ...]]:
    """The GPU ids of each of `workers` slots (gpus_per_slot each); refused when the host has too few."""
    per_slot = gpus_per_slot(available, gpus_per_step)
    if per_slot == 0:
        return [() for _ in range(workers)]
    if not available:
        raise InputError(
            f"--gpus-per-step {per_slot} but this host shows no GPU (set BISECT_GPUS=0,1,... to declare them)"
        )
    needed = workers * per_slot
    if needed > len(available):
        raise InputError(
            f"{workers} workers x {per_slot} GPUs per step need {needed} GPUs; "
            f"this host shows {len(available)} ({','.join(map(str, available))})"
        )
    return [available[i * per_slot : (i + 1) * per_slot] for i in range(workers)]
