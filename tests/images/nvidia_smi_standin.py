"""A stand-in for nvidia-smi, the physical GPUs' tool, on hosts without GPUs: it answers `nvidia-smi -L` and
`nvidia-smi --query-gpu=compute_cap --format=csv,noheader` as the real one does for the GPUs it is made with."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

H100 = ("NVIDIA H100 80GB HBM3", "9.0")  # (name, compute capability) as nvidia-smi prints them
A100 = ("NVIDIA A100-SXM4-80GB", "8.0")
B200 = ("NVIDIA B200", "10.0")

SCRIPT = """#!/bin/sh
case "$*" in
    "-L") printf '%s' {listing} ;;
    "--query-gpu=compute_cap --format=csv,noheader") printf '%s' {capabilities} ;;
    *) echo "nvidia-smi stand-in: no answer for: $*" >&2; exit 2 ;;
esac
"""
NO_GPU_SCRIPT = '#!/bin/sh\necho "No devices were found"\nexit 6\n'  # what the real one says where it sees none


def nvidia_smi_standin(folder: Path, gpus: Sequence[tuple[str, str]]) -> Path:
    """folder/nvidia-smi answering for a host with gpus (name, compute capability), in index order; returns folder,
    to put first on $PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    uuids = [f"GPU-{i:08x}-0000-4000-8000-{i:012x}" for i in range(len(gpus))]
    listing = "".join(f"GPU {i}: {name} (UUID: {uuids[i]})\n" for i, (name, _) in enumerate(gpus))
    capabilities = "".join(f"{capability}\n" for _, capability in gpus)
    script = SCRIPT.format(listing=shlex.quote(listing), capabilities=shlex.quote(capabilities))
    (folder / "nvidia-smi").write_text(script if gpus else NO_GPU_SCRIPT)
    (folder / "nvidia-smi").chmod(0o755)
    return folder
