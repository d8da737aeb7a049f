"""Noise benchmark: simulated bisects of flaky and noisy histories, four ways of bisecting them.

    python benchmarks/bench_noise.py [--bisects 10000] [--commits 1000] [--processes 2] [--out FILE.json]

Every cell bisects the same `--bisects` histories with every method: `--commits` suspects (positions
0..commits, 0 the good endpoint), the culprit drawn uniformly from 1..commits with `random.Random(seed)`,
seeds first-seed..first-seed+bisects-1 (`--first-seed`, default 0), one slot (W = 1, so runs = rounds). Cells:

* flake 0%, 1%, 5%, 10%, 20%: a pass/fail test; each run reports the wrong verdict with that probability;
* noise 0.5 and 1 effect: a metric whose good and bad levels are one effect apart, plus Gaussian noise of
  0.5 or 1 effect per run (no flakes); the threshold is the midpoint between the levels.
* auto noise 0.5 effect: the same metric; `product` compares with the endpoints' samples instead of a threshold
  (`--expect auto --direction higher --repeat 5 --max-repeat 20`), the other methods as in "noise 0.5 effect".

Methods (simulate testers driving the real strategy classes):

* plain     git bisect: KArySearch, one run per commit, its verdict trusted.
* fixed10   syz-bisect style: KArySearch, 10 runs per commit, majority vote (a 5-5 tie counts as bad).
* pinpoint  Pinpoint style: KArySearch; 10 -> 20 -> 40 -> 80 -> 160 runs while undecided, compared by
            min(Mann-Whitney U p, KS p) with samples of both endpoints topped up to the same count (those
            endpoint runs are counted); alpha 0.01; the nearer endpoint when still undecided at 160.
* ours      NoisyBisect (posterior, flake rate learned), then confirmation of the boundary (Fisher, alpha
            0.02, at most 20 pairs). Pass/fail: one run per probe. Metric: adaptive repeats 1 -> 3 -> 7
            with the threshold decision and a noise band of half the noise sigma (t-test alpha 0.01).
* ours_search  ours without the confirmation: the search alone.
* product   what `bisect start --strategy noisy` runs: the coordinator's own decision core
            (benchmarks/simulate_core.py) with lazy endpoint checks, the endpoints' noise rule and
            confirmation; metric cells add --max-repeat 7 and a noise band of half the noise sigma.

Cell "one-sided 25%": a good commit fails 25% of its runs, a bad one always fails (the issue's case).

Reported per cell and method: correct % (the named commit is the culprit), wrong %, not reproducible %
(the confirmation refused the boundary: no answer, but no wrong answer), endpoints mismatch % (the endpoints were
judged not to differ: wrong, every history has a culprit), mean / p95 / max runs. The
targets: at 10% flakes ours >= 99% correct with at most 3x the runs of the noiseless case; at 0% flakes
exactly as cheap as plain bisection (checked seed by seed).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_noise.py` without PYTHONPATH

import random  # noqa: E402

from simulate import (  # noqa: E402
    AdaptiveThreshold,
    ConfirmPolicy,
    EscalatingComparison,
    History,
    MajorityVote,
    SimResult,
    SimStatus,
    SingleRun,
    Tester,
    simulate,
)
from simulate_core import ProductOptions, simulate_core  # noqa: E402

from bisector.core.strategies import KArySearch, NoisyBisect, Strategy  # noqa: E402

METHODS = ("plain", "fixed10", "pinpoint", "ours", "ours_search", "product")
MAX_RUNS = 20_000  # per bisect; far above what any method needs here, reported if ever hit
CHUNK = 250
ACCURACY_TARGET = 0.99
RUNS_FACTOR_TARGET = 3.0


@dataclass(frozen=True)
class Cell:
    name: str
    flake_rate: float = 0.0
    noise_sigma: float | None = None
    one_sided: bool = False
    auto: bool = False  # product: --expect auto, not a threshold


CELLS = (
    Cell("flake 0%", 0.0),
    Cell("flake 1%", 0.01),
    Cell("flake 5%", 0.05),
    Cell("flake 10%", 0.10),
    Cell("flake 20%", 0.20),
    Cell("noise 0.5 effect", 0.0, 0.5),
    Cell("noise 1 effect", 0.0, 1.0),
    Cell("one-sided 25%", 0.25, one_sided=True),
    Cell("auto noise 0.5 effect", 0.0, 0.5, auto=True),
)


def method_parts(method: str, cell: Cell) -> tuple[Strategy, Tester, ConfirmPolicy | None]:
    if method == "plain":
        return KArySearch(), SingleRun(), None
    if method == "fixed10":
        return KArySearch(), MajorityVote(10), None
    if method == "pinpoint":
        return KArySearch(), EscalatingComparison(), None
    tester: Tester = SingleRun()
    if cell.noise_sigma is not None:
        tester = AdaptiveThreshold(band=cell.noise_sigma / 2, max_repeat=7)
    return NoisyBisect(), tester, (ConfirmPolicy() if method == "ours" else None)


def history_for(seed: int, commits: int, cell: Cell) -> History:
    culprit = random.Random(seed).randint(1, commits)
    return History(
        commits + 1, culprit, flake_rate=cell.flake_rate, noise_sigma=cell.noise_sigma, one_sided=cell.one_sided
    )


def run_chunk(task: tuple[str, Cell, int, int, int]) -> tuple[str, str, list[tuple[bool, str, int, int]], float]:
    method, cell, commits, first_seed, count = task
    if method == "product":
        return run_product_chunk(cell, commits, first_seed, count)
    strategy, tester, confirm = method_parts(method, cell)
    started = time.perf_counter()
    rows = []
    for seed in range(first_seed, first_seed + count):
        result: SimResult = simulate(
            strategy, history_for(seed, commits, cell), tester, seed=seed, confirm=confirm, max_runs=MAX_RUNS
        )
        rows.append((result.correct, result.status.value, result.runs, result.confirm_runs))
    return method, cell.name, rows, time.perf_counter() - started


def run_product_chunk(
    cell: Cell, commits: int, first_seed: int, count: int
) -> tuple[str, str, list[tuple[bool, str, int, int]], float]:
    options = ProductOptions(strategy="noisy")
    if cell.auto:
        options = ProductOptions(strategy="noisy", expect="auto", repeat=5, max_repeat=20)
    elif cell.noise_sigma is not None:
        options = ProductOptions(strategy="noisy", max_repeat=7, noise_band=cell.noise_sigma / 2)
    started = time.perf_counter()
    rows = []
    for seed in range(first_seed, first_seed + count):
        result = simulate_core(history_for(seed, commits, cell), options, seed=seed, max_runs=MAX_RUNS)
        rows.append((result.correct, result.status.value, result.runs, result.confirm_runs))
    return "product", cell.name, rows, time.perf_counter() - started


def wilson_low(successes: int, n: int, z: float = 1.96) -> float:
    """Lower end of the 95% Wilson interval of a proportion."""
    if n == 0:
        return 0.0
    p = successes / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def summarise(rows: list[tuple[bool, str, int, int]], cpu_s: float) -> dict[str, object]:
    n = len(rows)
    runs = sorted(r[2] for r in rows)
    correct = sum(r[0] for r in rows)
    not_reproducible = sum(r[1] == SimStatus.NOT_REPRODUCIBLE.value for r in rows)
    budget = sum(r[1] == SimStatus.BUDGET.value for r in rows)
    mismatch = sum(r[1] == SimStatus.ENDPOINTS_MISMATCH.value for r in rows)  # every history here has a culprit
    return {
        "bisects": n,
        "correct": correct / n,
        "correct_95_low": wilson_low(correct, n),
        "wrong": (n - correct - not_reproducible - budget - mismatch) / n,
        "not_reproducible": not_reproducible / n,
        "endpoints_mismatch": mismatch / n,
        "budget_hit": budget / n,
        "mean_runs": statistics.fmean(runs),
        "p95_runs": runs[min(n - 1, math.ceil(0.95 * n) - 1)],
        "max_runs": runs[-1],
        "mean_confirm_runs": statistics.fmean(r[3] for r in rows),
        "cpu_s": cpu_s,
    }


def machine() -> dict[str, object]:
    import numpy
    import scipy

    model = "unknown"
    memory_gib = float("nan")
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        kib = next(
            int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if "MemTotal" in line
        )
        memory_gib = kib / 2**20
    except (OSError, StopIteration):
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(memory_gib, 1),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "platform": platform.platform(),
    }


def check_targets(results: dict[str, dict[str, dict[str, object]]], exact_at_zero: bool) -> dict[str, object]:
    ours10, ours0, plain0 = results["flake 10%"]["ours"], results["flake 0%"]["ours"], results["flake 0%"]["plain"]
    runs10, runs0, plain_runs0 = (float(str(x["mean_runs"])) for x in (ours10, ours0, plain0))
    accuracy10 = float(str(ours10["correct"]))
    return {
        "accuracy_at_10pct": accuracy10,
        "accuracy_at_10pct_met": accuracy10 >= ACCURACY_TARGET,
        "runs_at_10pct_over_ours_at_0pct": runs10 / runs0,
        "runs_at_10pct_over_plain_at_0pct": runs10 / plain_runs0,
        "runs_factor_met_vs_ours_at_0pct": runs10 <= RUNS_FACTOR_TARGET * runs0,
        "runs_factor_met_vs_plain_at_0pct": runs10 <= RUNS_FACTOR_TARGET * plain_runs0,
        "search_exactly_plain_at_0pct": exact_at_zero,
        "total_runs_at_0pct_ours_minus_plain": float(str(ours0["mean_runs"])) - plain_runs0,
    }


def markdown_table(results: dict[str, dict[str, dict[str, object]]]) -> str:
    lines = [
        "| cell | method | correct | wrong | not reproducible | endpoints mismatch | mean runs | p95 runs | max runs |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for cell, by_method in results.items():
        for method, s in by_method.items():
            lines.append(
                f"| {cell} | {method} | {100 * float(str(s['correct'])):.2f}% | {100 * float(str(s['wrong'])):.2f}% | "
                f"{100 * float(str(s['not_reproducible'])):.2f}% | {100 * float(str(s['endpoints_mismatch'])):.2f}% | "
                f"{float(str(s['mean_runs'])):.1f} | "
                f"{s['p95_runs']} | {s['max_runs']} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bisects", type=int, default=10_000, help="bisects per cell and method")
    parser.add_argument("--commits", type=int, default=1000, help="suspects per bisect")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cells", default="", help="comma-separated cell names to run (default: all)")
    parser.add_argument("--methods", default="", help="comma-separated methods to run (default: all)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed..first-seed+bisects-1")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()

    cells = [c for c in CELLS if not args.cells or c.name in args.cells.split(",")]
    methods = [m for m in METHODS if not args.methods or m in args.methods.split(",")]
    end = args.first_seed + args.bisects
    tasks = [
        (method, cell, args.commits, first, min(CHUNK, end - first))
        for cell in cells
        for method in methods
        for first in range(args.first_seed, end, CHUNK)
    ]
    rows: dict[tuple[str, str], list[tuple[bool, str, int, int]]] = {}
    cpu: dict[tuple[str, str], float] = {}
    wall_started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        # Chunks come back in task order, so every method's rows stay in seed order.
        for method, cell_name, chunk_rows, cpu_s in pool.imap(run_chunk, tasks):
            rows.setdefault((cell_name, method), []).extend(chunk_rows)
            cpu[(cell_name, method)] = cpu.get((cell_name, method), 0.0) + cpu_s
    wall_s = time.perf_counter() - wall_started

    results = {cell.name: {m: summarise(rows[(cell.name, m)], cpu[(cell.name, m)]) for m in methods} for cell in cells}
    report: dict[str, object] = {
        "command": " ".join(["python", "benchmarks/bench_noise.py", *sys.argv[1:]]),
        "machine": machine(),
        "bisects_per_cell": args.bisects,
        "first_seed": args.first_seed,
        "commits": args.commits,
        "slots": 1,
        "wall_s": wall_s,
        "results": results,
    }
    if "flake 0%" in results and "flake 10%" in results and methods == list(METHODS):
        zero = "flake 0%"
        plain_runs = [r[2] for r in rows[(zero, "plain")]]
        search_runs = [r[2] for r in rows[(zero, "ours_search")]]
        report["targets"] = check_targets(results, exact_at_zero=plain_runs == search_runs)
    print(markdown_table(results))
    print(json.dumps({k: v for k, v in report.items() if k != "results"}, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=lambda o: asdict(o)) + "\n")


if __name__ == "__main__":
    main()
