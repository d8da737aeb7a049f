"""Benchmarks of the kernel stack.

    python -m kernels.bench accept-length [--k 3]   mean accept length of the self-speculative decoder
    python -m kernels.bench gemm                    tiny GEMM time at m = 1, 2, 4, 8 vs torch.matmul

``accept-length`` prints ``accept length: X.XXXX`` and one JSON line, and exits 0 whenever it measured (the
threshold is the bisect's job). It runs the CPU configuration on CPU and the full-size one on CUDA.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from . import model, native, tiny_gemm
from .cli_input import KernelsInputError, check_threads, resolve_device, run_checked


def _config(name: str, device: torch.device, assignments: Sequence[str]) -> model.DecoderConfig:
    config = model.CONFIGS["cuda" if device.type == "cuda" else "cpu"] if name == "auto" else model.CONFIGS[name]
    fields = {f.name: f.type for f in dataclasses.fields(model.DecoderConfig)}
    changes: dict[str, Any] = {}
    for assignment in assignments:
        key, _, value = assignment.partition("=")
        if key not in fields or key == "name":
            raise KernelsInputError(f"--set: unknown config field {key!r}")
        default = getattr(config, key)
        try:
            changes[key] = type(default)(value)
        except ValueError:
            raise KernelsInputError(f"--set {assignment!r}: {key} takes a {type(default).__name__}") from None
    return dataclasses.replace(config, **changes) if changes else config


def dispatch_summary(config: model.DecoderConfig, k: int) -> list[dict[str, object]]:
    """How each projection of the decoder is dispatched in decode (m = 1) and in verify (m = k + 1)."""
    rows: list[dict[str, object]] = []
    for op, (n, kk) in config.gemm_shapes().items():
        threshold = tiny_gemm.threshold_for(n, kk)
        rows.append(
            {
                "op": op,
                "N": n,
                "K": kk,
                "mma_min_m": "simt" if threshold.pinned_simt else threshold.mma_min_m,
                "reason": str(threshold.reason),
                "decode": str(threshold.kernel_at(1)),
                "verify": str(threshold.kernel_at(k + 1)),
            }
        )
    return rows


def accept_length(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    device = resolve_device(args.device)
    threads = check_threads(args.threads)
    if device.type == "cpu":
        torch.set_num_threads(threads)
    config = _config(args.config, device, args.set)
    decoder = model.Decoder(config, device)
    result = model.measure_accept_length(decoder, args.k)
    backend = tiny_gemm.backend_for(device.type)
    print(f"accept length: {result.accept_length:.4f}")
    report = {
        "metric": "accept_length",
        "accept_length": result.accept_length,
        "k": args.k,
        "rounds": result.rounds,
        "histogram": result.histogram,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.machine()})",
        "backend": backend,
        "accept_count": "compiled" if native.COMPILED else "python",  # kernels/native.py, built by the demo's build
        "config": config.to_json(),
        "dispatch": dispatch_summary(config, args.k),
        "measure_s": round(result.wall_s, 3),
        "wall_s": round(time.perf_counter() - start, 3),
        "torch": torch.__version__,
    }
    print(json.dumps(report))
    return 0


def gemm(args: argparse.Namespace) -> int:
    from . import gemm_bench

    return gemm_bench.main(args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    acc = sub.add_parser("accept-length", help="mean accept length of the self-speculative decoder")
    acc.add_argument("--k", type=int, default=3, help="draft tokens per verify (default 3)")
    acc.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    acc.add_argument("--config", default="auto", choices=["auto", *model.CONFIGS], help="decoder size")
    acc.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="change a config field")
    acc.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    acc.set_defaults(func=accept_length)
    gem = sub.add_parser("gemm", help="tiny GEMM timing at m = 1, 2, 4, 8 against torch.matmul")
    gem.add_argument("--device", default="auto")
    gem.add_argument("--m", default="1,2,4,8", help="batch sizes to time")
    gem.add_argument(
        "--timing",
        choices=["graph", "launch"],
        default="graph",
        help="CUDA: per call in a CUDA graph of cold-weight calls (default), or launch path included (do_bench)",
    )
    gem.add_argument("--sweep", action="store_true", help="try candidate tiles, check them, keep the fastest")
    gem.add_argument("--tiles-out", default="", help="write the chosen tiles as KERNELS_TRITON_TILES JSON")
    gem.add_argument("--json-out", default="", help="write all measurements as JSON")
    gem.set_defaults(func=gemm)
    args = parser.parse_args(argv)
    return run_checked(parser.prog, args.func, args)


if __name__ == "__main__":
    sys.exit(main())
