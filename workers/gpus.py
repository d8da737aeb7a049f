"""Which GPUs this host offers to bisect steps, and how they are split into worker slots."""

from __future__ import annotations

import functools
import os
import re
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


def _listed_gpus() -> tuple[int, ...]:
    return tuple(range(sum(1 for line in _nvidia_smi("-L") if line.startswith("GPU "))))


def gpu_architectures(cuda_visible_devices: str | None) -> tuple[str, ...]:
    """The compute capabilities ("8.0", "9.0"), sorted and unique, of the GPUs a process whose $CUDA_VISIBLE_DEVICES
    is this sees (None: unset, every GPU nvidia-smi lists); empty without nvidia-smi or where its driver has no
    compute_cap to query. nvidia-smi ignores $CUDA_VISIBLE_DEVICES and lists the GPUs by index, the ids
    visible_gpus() gives."""
    listed = [line.strip() for line in _nvidia_smi("--query-gpu=compute_cap", "--format=csv,noheader")]
    if cuda_visible_devices is None:
        seen = listed
    else:
        ids = [part.strip() for part in cuda_visible_devices.split(",")]
        seen = [listed[int(part)] for part in ids if part.isdigit() and int(part) < len(listed)]
    capabilities = {value for value in seen if re.fullmatch(r"\d+\.\d+", value)}
    return tuple(sorted(capabilities, key=lambda value: tuple(int(n) for n in value.split("."))))


@functools.cache
def _nvidia_smi(*args: str) -> tuple[str, ...]:
    """What nvidia-smi prints for args, line by line, asked once per process (it takes up to a second on a GPU
    host); nothing where it is missing or fails."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        answer = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(answer.stdout.splitlines()) if answer.returncode == 0 else ()


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
