"""Batch-invariance probe of the dispatched tiny GEMM.

    python -m kernels.probe batch-invariance [--m-max 16] [--shape NxK ...]

For every shape of the tuning table (with any KERNELS_DISPATCH_OVERRIDE rows), each of m_max random rows is
computed alone (m = 1) and then inside batches m = 2..m_max, through the dispatcher. A shape is
batch-variant from the first m at which some row's result differs from its m = 1 result. The comparison is
made on the fp32 accumulator, so an ordering difference cannot hide behind the bf16 rounding; the share of
bf16 outputs that differ is reported too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from . import tiny_gemm
from .cli_input import KernelsInputError, check_threads, parse_shape, resolve_device, run_checked


@dataclass(frozen=True)
class ShapeProbe:
    n: int
    k: int
    mma_min_m: int | str
    reason: str
    variant_from_m: int | None  # None: invariant for m = 1..m_max
    rows_differing: int  # at variant_from_m, rows whose fp32 result differs from m = 1
    bf16_differing: float  # at variant_from_m, share of bf16 outputs that differ from m = 1

    @property
    def variant(self) -> bool:
        return self.variant_from_m is not None


def probe_shape(n: int, k: int, m_max: int, device: torch.device) -> ShapeProbe:
    gen = torch.Generator().manual_seed(n * 100_003 + k)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(torch.bfloat16).to(device)
    x = torch.randn(m_max, k, generator=gen).to(torch.bfloat16).to(device)
    alone = torch.cat([tiny_gemm.tiny_gemm(x[i : i + 1], w, op="probe", out_fp32=True) for i in range(m_max)])
    threshold = tiny_gemm.threshold_for(n, k)
    variant_from, rows, bf16_share = None, 0, 0.0
    for m in range(2, m_max + 1):
        batch = tiny_gemm.tiny_gemm(x[:m], w, op="probe", out_fp32=True)
        differs = (batch != alone[:m]).any(dim=1)
        if bool(differs.any()):
            variant_from, rows = m, int(differs.sum())
            bf16_share = float((batch.to(torch.bfloat16) != alone[:m].to(torch.bfloat16)).float().mean())
            break
    return ShapeProbe(
        n=n,
        k=k,
        mma_min_m="simt" if threshold.pinned_simt else threshold.mma_min_m,
        reason=str(threshold.reason),
        variant_from_m=variant_from,
        rows_differing=rows,
        bf16_differing=bf16_share,
    )


def probed_shapes(selected: Sequence[str]) -> list[tuple[int, int]]:
    if selected:
        return [parse_shape(s) for s in selected]
    shapes = set(tiny_gemm.tuned_table())
    shapes.update(tiny_gemm.override_rows())
    return sorted(shapes)


def batch_invariance(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    threads = check_threads(args.threads)
    shapes = probed_shapes(args.shape)  # checked before any output
    if args.m_max < 1:
        raise KernelsInputError(f"--m-max {args.m_max}: expected a positive batch size")
    if device.type == "cpu":
        torch.set_num_threads(threads)
    results = []
    print(f"batch invariance of the tiny GEMM, m = 1..{args.m_max} against m = 1 ({device.type})")
    for n, k in shapes:
        result = probe_shape(n, k, args.m_max, device)
        results.append(result)
        where = "SIMT at every m" if result.mma_min_m == "simt" else f"MMA from m={result.mma_min_m}"
        verdict = (
            f"BATCH-VARIANT from m={result.variant_from_m} ({result.rows_differing} of {result.variant_from_m} rows "
            f"differ; {100 * result.bf16_differing:.2f}% of bf16 outputs)"
            if result.variant
            else "batch-invariant"
        )
        print(f"{n:>6}x{k:<6} {where:<16} ({result.reason:<10}) {verdict}", flush=True)
    summary = {
        "probe": "batch-invariance",
        "m_max": args.m_max,
        "device": device.type,
        "shapes": [{**asdict(r), "variant": r.variant} for r in results],
    }
    print(json.dumps(summary))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.probe", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    inv = sub.add_parser("batch-invariance", help="check every tabled shape for m = 1..m_max against m = 1")
    inv.add_argument("--m-max", type=int, default=16)
    inv.add_argument("--shape", action="append", default=[], metavar="NxK", help="probe only these shapes")
    inv.add_argument("--device", default="auto")
    inv.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    inv.set_defaults(func=batch_invariance)
    args = parser.parse_args(argv)
    return run_checked(parser.prog, args.func, args)


if __name__ == "__main__":
    sys.exit(main())
