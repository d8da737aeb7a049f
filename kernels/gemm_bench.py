"""Tiny GEMM timing (``python -m kernels.bench gemm``): each kernel at m = 1, 2, 4, 8 on the decoder's three
projections, against ``torch.nn.functional.linear`` (cuBLAS on CUDA), the memory bound (weight bytes over
HBM bandwidth) and the launch floor (an empty kernel, timed the same way). With ``--sweep`` it first tries
candidate tiles per shape and kernel, keeps those that are correct, bitwise batch invariant (every m, every row
position), bitwise repeatable and bitwise equal to the shipped tiles launched without programmatic dependent launch
(tiles are numerics: other bits would move the decoder's accept length), and picks the fastest. It exits 1 when a
kernel it reports fails one of those checks.

On CUDA the default timing (``--timing graph``) captures a CUDA graph of back-to-back calls, each on another
copy of the weights (copies totalling more than 3x the L2 cache, so every call reads its weights from HBM), as
a decoder captured in a graph runs them; time per call = graph replay time / calls, median of 10 replays. This
leaves out the Python launch path, which at these sizes costs more than the kernels. ``--timing launch``
instead takes medians of ``triton.testing.do_bench`` (L2 flushed before each call), launch path included.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import torch

from . import tiny_gemm
from .cli_input import parse_batch_sizes, resolve_device
from .kernel_kind import Kernel

if TYPE_CHECKING:
    from .triton_gemm import Tiles

SHAPES: list[tuple[int, int]] = [(144, 7168), (896, 7168), (1536, 128)]
NOMINAL_HBM_BYTES_PER_S = 4.8e12  # H200 datasheet
INVARIANCE_ROWS = 16
REPEATS = 20
GRAPH_MIN_CALLS = 200
GRAPH_REPLAYS = 10

# Sweep candidates: [block_n, block_k, split_k, num_warps, num_stages, prefetch, block_m, form] per (kernel,
# shape), trailing fields optional (form 1: the SIMT row form); the shape's current tiles are always tried too.
# Most keep the shipped numerics: the same split (K_SPLIT) and, for SIMT, the same per-row reduction layout (one
# warp across BLOCK_K, so warps and BLOCK_N only spread rows); MMA's k16 chain does not depend on BLOCK_N,
# BLOCK_K, warps or stages. A few change the split, to show what other numerics would buy.
_CANDIDATES: dict[tuple[str, int, int], list[tuple[int, ...]]] = {
    ("simt", 144, 7168): [
        (8, 256, 28, 4, 1, 1, 4, 1),
        (8, 256, 28, 4, 1, 1, 8, 1),
        (4, 256, 28, 4, 1, 1, 4, 1),
        (16, 256, 28, 4, 1, 1, 4, 1),
        (8, 256, 28, 8, 1, 1, 4, 1),
        (4, 256, 28, 1, 1, 1, 4, 1),
        (2, 256, 28, 1, 1, 1, 8, 1),
        (8, 512, 14, 4, 1, 1, 4, 1),
    ],
    ("simt", 896, 7168): [
        (4, 1024, 7, 1, 1, 1, 4, 1),
        (2, 1024, 7, 1, 1, 1, 8, 1),
        (2, 1024, 7, 1, 1, 1, 4, 1),
        (2, 1024, 7, 1, 1, 0, 8, 1),
        (1, 1024, 7, 1, 1, 1, 8, 1),
    ],
    ("simt", 1536, 128): [
        (4, 128, 1, 1, 1, 1, 4, 1),
        (2, 128, 1, 1, 1, 0, 4, 0),
        (8, 128, 1, 1, 1, 0, 4, 0),
        (4, 128, 1, 1, 1, 0, 8, 0),
    ],
    ("mma", 144, 7168): [(16, 128, 14, 4, 4), (16, 512, 14, 4, 1), (16, 128, 14, 1, 4), (16, 256, 14, 2, 2)],
    ("mma", 896, 7168): [
        (16, 128, 14, 4, 4),
        (16, 128, 14, 2, 4),
        (16, 128, 14, 1, 4),
        (32, 128, 14, 4, 4),
        (16, 256, 14, 4, 2),
        (16, 512, 14, 4, 1),
        (32, 512, 14, 4, 1),
        (16, 512, 14, 2, 1),
        (64, 128, 14, 4, 4),
        (32, 128, 14, 8, 4),
        (16, 64, 14, 4, 8),
        (16, 128, 28, 4, 2),
        (16, 128, 7, 4, 8),
        (64, 256, 14, 4, 2),
        (32, 512, 14, 4, 2),
    ],
    ("mma", 1536, 128): [(16, 128, 1, 4, 1), (16, 128, 1, 1, 1), (32, 128, 1, 4, 1), (16, 64, 1, 4, 2)],
}


@dataclass
class Check:
    rel_err_fp32: float
    rel_err_bf16: float
    invariant_by_m: bool
    invariant_by_position: bool
    repeatable: bool
    same_bits_as_shipped: bool  # fp32 output bitwise the shipped tiles' without dependent launch: same numerics

    @property
    def ok(self) -> bool:
        return (
            self.rel_err_fp32 < 1e-5
            and self.rel_err_bf16 < 1e-2
            and self.invariant_by_m
            and self.invariant_by_position
            and self.repeatable
        )


@dataclass
class KernelRun:
    kernel: str
    tiles: list[int] | None
    check: Check | None = None
    us: dict[int, float] = field(default_factory=dict)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.check is not None and self.check.ok and bool(self.us)

    @property
    def keeps_numerics(self) -> bool:
        return self.ok and self.check is not None and self.check.same_bits_as_shipped

    def mean_us(self) -> float:
        return statistics.mean(self.us.values()) if self.us else float("inf")


@dataclass
class ShapeRun:
    n: int
    k: int
    simt: KernelRun
    mma: KernelRun
    linear_us: dict[int, float]
    hbm_bound_us: float | None  # weight bytes over the measured copy bandwidth; None where none was measured
    hbm_nominal_us: float  # weight bytes over the datasheet bandwidth
    tried: list[KernelRun]
    table_kernel: dict[int, str] = field(default_factory=dict)  # per m: the kernel the shipped table runs

    def table_us(self, m: int) -> float:
        """The tiny GEMM as the decoder calls it: the time of the kernel the shipped table picks at this m."""
        run = self.simt if self.table_kernel.get(m) == str(Kernel.SIMT) else self.mma
        return run.us.get(m, float("nan"))


def _warm_up(device: torch.device) -> None:
    """~50 ms of matrix products, so the clocks are up when timing starts (an idle H200 sits at 375 MHz)."""
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        a @ a
    torch.cuda.synchronize(device)


def _time_us(fn: Callable[[], object], device: torch.device) -> float:
    """Median time of fn; on CUDA the smaller of two do_bench medians taken right after a warm-up."""
    if device.type == "cuda":
        import triton.testing

        _warm_up(device)
        runs = [triton.testing.do_bench(fn, warmup=25, rep=60, return_mode="median") for _ in range(2)]
        return float(min(runs)) * 1e3
    fn()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def _graph_time_us(
    call: Callable[[torch.Tensor], object], w: torch.Tensor, device: torch.device, cold: bool = True
) -> float:
    """Per-call time of ``call`` in a CUDA graph of back-to-back calls over rotating copies of the weights (two
    copies when not ``cold``: the weights then stay in L2)."""
    l2_bytes = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20))
    copies = max(2, -(-3 * l2_bytes // (w.numel() * w.element_size()))) if cold else 2
    weights = [w.clone() for _ in range(copies)]
    calls = copies * max(1, -(-GRAPH_MIN_CALLS // copies))
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # compile, allocate and warm up outside the capture
        for copy in weights[:3]:
            call(copy)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            call(weights[i % copies])
    _warm_up(device)
    for _ in range(3):
        graph.replay()
    samples = []
    for _ in range(GRAPH_REPLAYS):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    del graph, weights
    return float(statistics.median(samples))


def time_call_us(call: Callable[[torch.Tensor], object], w: torch.Tensor, device: torch.device, timing: str) -> float:
    """Time of one call on weights ``w``: in a CUDA graph (default on CUDA), or launch path included."""
    if device.type == "cuda" and timing == "graph":
        return _graph_time_us(call, w, device)
    return _time_us(lambda: call(w), device)


def launch_floor_us(device: torch.device) -> float:
    """Per-call time of an empty Triton kernel in the same CUDA-graph timing: the least any kernel costs there."""
    from . import triton_kernels

    return _graph_time_us(lambda _: triton_kernels.empty_kernel[(1,)](), torch.empty(1, device=device), device, False)


def copy_bandwidth(device: torch.device) -> float | None:
    """Bytes per second of a 1 GiB device-to-device copy, counting bytes read and written; None where the copy
    timed at zero (no meaningful bandwidth)."""
    src = torch.empty(1 << 28, dtype=torch.float32, device=device).normal_()
    dst = torch.empty_like(src)
    us = _time_us(lambda: dst.copy_(src), device)
    return 2 * src.numel() * 4 / (us * 1e-6) if us > 0 else None


def bandwidth_line(device: torch.device, bandwidth: float | None) -> str:
    """The report's bandwidth line: the measured copy bandwidth, or why there is none (and no HBM bound)."""
    if bandwidth is not None:
        return f"copy bandwidth: {bandwidth / 1e12:.2f} TB/s"
    if device.type != "cuda":
        return "no copy bandwidth or HBM bound: the CPU has no HBM to measure"
    return "no copy bandwidth or HBM bound: the copy timed at 0 us"


def _run(kernel: Kernel, x: torch.Tensor, w: torch.Tensor, tiles: Tiles | None, out_fp32: bool) -> torch.Tensor:
    if tiles is not None:
        from . import triton_gemm

        return triton_gemm.run(kernel, x, w, out_fp32=out_fp32, tiles=tiles)
    return tiny_gemm.run_kernel(kernel, x, w, out_fp32=out_fp32)


@contextlib.contextmanager
def _without_dependent_launch() -> Iterator[None]:
    from .triton_gemm import PDL_ENV

    was = os.environ.get(PDL_ENV)
    os.environ[PDL_ENV] = "0"
    try:
        yield
    finally:
        if was is None:
            del os.environ[PDL_ENV]
        else:
            os.environ[PDL_ENV] = was


def check(kernel: Kernel, w: torch.Tensor, tiles: Tiles | None = None) -> Check:
    """Correctness against an fp64 reference, batch invariance and repeatability of one kernel."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(INVARIANCE_ROWS, w.shape[1], generator=gen).to(torch.bfloat16).to(w.device)
    full = _run(kernel, x, w, tiles, True)
    with _without_dependent_launch():  # the plain launch path: weights first under PDL must not move a bit
        shipped = _run(kernel, x, w, None, True)
    ref = x.double() @ w.double().t()
    bf16 = _run(kernel, x, w, tiles, False)
    rows = range(INVARIANCE_ROWS)
    return Check(
        rel_err_fp32=float((full.double() - ref).norm() / ref.norm()),
        rel_err_bf16=float((bf16.double() - ref).norm() / ref.norm()),
        invariant_by_m=all(torch.equal(_run(kernel, x[: m + 1], w, tiles, True), full[: m + 1]) for m in rows),
        invariant_by_position=all(
            torch.equal(_run(kernel, x[i : i + 1], w, tiles, True), full[i : i + 1]) for i in rows
        ),
        repeatable=all(torch.equal(_run(kernel, x, w, tiles, True), full) for _ in range(REPEATS)),
        same_bits_as_shipped=torch.equal(full, shipped),
    )


def _candidates(kernel: Kernel, n: int, k: int) -> list[Tiles]:
    from . import triton_gemm

    found = [triton_gemm.tiles_for(kernel, n, k)]
    found += [triton_gemm.Tiles(*row) for row in _CANDIDATES.get((str(kernel), n, k), [])]
    return list(dict.fromkeys(found))


def _measure(
    kernel: Kernel, x: torch.Tensor, w: torch.Tensor, tiles: Tiles | None, ms: list[int], timing: str
) -> KernelRun:
    run = KernelRun(str(kernel), tiles.to_list() if tiles is not None else None)
    try:
        run.check = check(kernel, w, tiles)
        for m in ms:
            xm = x[:m]
            run.us[m] = time_call_us(
                lambda wc, xm=xm: _run(kernel, xm, wc, tiles, False),  # type: ignore[misc]
                w,
                x.device,
                timing,
            )
    except Exception as exc:  # a candidate that fails to compile or launch is reported, not fatal
        run.error = f"{type(exc).__name__}: {exc}"[:300]
    return run


def pick(runs: list[KernelRun]) -> KernelRun:
    """The fastest run that keeps the shipped numerics; the first (the shipped tiles) if none does."""
    keeping = [run for run in runs if run.keeps_numerics]
    return min(keeping, key=KernelRun.mean_us) if keeping else runs[0]


def measure_shape(
    n: int,
    k: int,
    ms: list[int],
    sweep: bool,
    bandwidth: float | None,
    device: torch.device,
    timing: str = "graph",
) -> ShapeRun:
    gen = torch.Generator().manual_seed(n + k)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(torch.bfloat16).to(device)
    x = torch.randn(max(ms), k, generator=gen).to(torch.bfloat16).to(device)
    tried: list[KernelRun] = []
    best: dict[Kernel, KernelRun] = {}
    for kernel in (Kernel.SIMT, Kernel.MMA):
        options: list[Tiles | None] = list(_candidates(kernel, n, k)) if sweep else [None]
        runs = [_measure(kernel, x, w, tiles, ms, timing) for tiles in options]
        for run in runs:
            line = {"shape": f"{n}x{k}", **asdict(run), "ok": run.ok, "keeps_numerics": run.keeps_numerics}
            print(json.dumps(line), flush=True)
        tried += runs
        best[kernel] = pick(runs)
    linear_us = {}
    for m in ms:
        xm = x[:m]
        linear_us[m] = time_call_us(
            lambda wc, xm=xm: torch.nn.functional.linear(xm, wc),  # type: ignore[misc]
            w,
            device,
            timing,
        )
    weight_bytes = n * k * 2
    return ShapeRun(
        n,
        k,
        best[Kernel.SIMT],
        best[Kernel.MMA],
        linear_us,
        weight_bytes / bandwidth * 1e6 if bandwidth else None,
        weight_bytes / NOMINAL_HBM_BYTES_PER_S * 1e6,
        tried,
        {m: str(tiny_gemm.threshold_for(n, k).kernel_at(m)) for m in ms},
    )


def main(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    ms = parse_batch_sizes(args.m)
    backend = tiny_gemm.backend_for(device.type)
    bandwidth = copy_bandwidth(device) if device.type == "cuda" else None
    floor_us = launch_floor_us(device) if device.type == "cuda" and backend == "triton" else None
    sweep = bool(args.sweep) and backend == "triton"
    shapes = [measure_shape(n, k, ms, sweep, bandwidth, device, args.timing) for n, k in SHAPES]
    chosen: dict[str, dict[str, list[int]]] = {"simt": {}, "mma": {}}
    for shape in shapes:
        for run in (shape.simt, shape.mma):
            if run.tiles is not None:
                chosen[run.kernel][f"{shape.n}x{shape.k}"] = run.tiles
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "backend": backend,
        "torch": torch.__version__,
        "triton": _triton_version() if backend == "triton" else None,
        "timing": args.timing,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "launch_floor_us": floor_us,
        "chosen_tiles": chosen,
        "shapes": [asdict(s) for s in shapes],
    }
    if args.tiles_out:
        with open(args.tiles_out, "w", encoding="utf-8") as out:
            json.dump(chosen, out)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=1)
    print(json.dumps({"chosen_tiles": chosen}))
    print(f"device: {report['device']}  backend: {backend}  {bandwidth_line(device, bandwidth)}")
    if floor_us is not None:
        print(f"launch floor (an empty kernel): {floor_us:.2f} us; 'vs bound' divides by the larger of the two bounds")
    hbm_header = f" {'hbm bound us':>13} {'vs bound':>9}" if bandwidth is not None else ""
    print(
        f"{'shape':>10} {'m':>3} {'simt us':>9} {'mma us':>9} {'table':>6} {'table us':>9} {'linear us':>10} "
        f"{'vs linear':>9}{hbm_header}"
    )
    for shape in shapes:
        for m in ms:
            table_us = shape.table_us(m)
            hbm = ""
            if shape.hbm_bound_us is not None:
                bound_us = max(shape.hbm_bound_us, floor_us or 0.0)
                hbm = f" {shape.hbm_bound_us:>13.2f} {table_us / bound_us:>8.2f}x"
            print(
                f"{shape.n:>4}x{shape.k:<5} {m:>3} {shape.simt.us.get(m, float('nan')):>9.2f} "
                f"{shape.mma.us.get(m, float('nan')):>9.2f} {shape.table_kernel[m]:>6} {table_us:>9.2f} "
                f"{shape.linear_us[m]:>10.2f} {shape.linear_us[m] / table_us:>8.2f}x{hbm}"
            )
    broken = failed_checks(shapes)
    if broken:
        print(f"failed a check (correct, batch invariant, repeatable, same bits without PDL): {', '.join(broken)}")
        return 1
    return 0


def failed_checks(shapes: list[ShapeRun]) -> list[str]:
    """'896x7168 mma' for each reported kernel that failed a check or gave other bits than the shipped tiles."""
    return [f"{s.n}x{s.k} {run.kernel}" for s in shapes for run in (s.simt, s.mma) if not run.keeps_numerics]


def _triton_version() -> str:
    import triton

    return str(triton.__version__)
