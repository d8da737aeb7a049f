"""Rounds of a clean bisect through the product's decision core, over every culprit position.

    python benchmarks/bench_kary.py [--cases 1000:2,1000:4,1000:8,1000:16,100:8,10000:8]
                                    [--strategy kary|noisy] [--flake-rate F [--seeds K]] [--out FILE.json]

For each case n:W, every culprit position 1..n of a range of n suspects (`History(n + 1, culprit)`: position 0
the good end, n the bad end) is bisected once by `simulate_core` (the coordinator's own decision core,
lazy endpoint checks, W workers, every run one time unit, a round's results taken together). Reported per case:
mean and worst rounds (the makespan), how many culprits finish in the fewest rounds any of them needs and in
the worst, and mean / worst runs. A clean test gives no noise, so the run is deterministic; a wrong answer
exits 1. `--strategy noisy` runs the same through `--strategy noisy` (which runs both endpoints first).
`--flake-rate F`: every run reports the other state with probability F (the product switches to the noisy
strategy once it sees a flake); each culprit is bisected with `--seeds` seeds, and wrong answers are counted.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT, ceil_log, machine_info, write_results

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_kary.py` without PYTHONPATH

from simulate import History
from simulate_core import ProductOptions, simulate_core

DEFAULT_CASES = "1000:2,1000:4,1000:8,1000:16,100:8,10000:8"


def run_case(suspects: int, workers: int, options: ProductOptions, flake_rate: float, seeds: int) -> dict[str, Any]:
    started = time.perf_counter()
    rounds: list[int] = []
    runs: list[int] = []
    correct = 0
    for culprit, k in itertools.product(range(1, suspects + 1), range(seeds)):
        history = History(suspects + 1, culprit, flake_rate=flake_rate)
        result = simulate_core(history, options, slots=workers, seed=culprit + k * suspects)
        if not result.correct and not flake_rate:
            raise SystemExit(f"n={suspects} W={workers} culprit {culprit}: wrong answer {result}")
        correct += result.correct
        rounds.append(result.rounds)
        runs.append(result.runs)
    spread = Counter(rounds)
    return {
        "n": suspects,
        "workers": workers,
        "ceil_log": ceil_log(suspects, workers + 1),
        "bisects": len(rounds),
        "correct": correct / len(rounds),
        "mean_rounds": statistics.fmean(rounds),
        "worst_rounds": max(rounds),
        "rounds_histogram": {str(r): spread[r] for r in sorted(spread)},
        "mean_runs": statistics.fmean(runs),
        "worst_runs": max(runs),
        "cpu_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES, help="n:W pairs, comma separated")
    parser.add_argument("--strategy", choices=("kary", "noisy"), default=None, help="default: the product's choice")
    parser.add_argument("--flake-rate", type=float, default=0.0, help="probability that a run flips (default 0)")
    parser.add_argument("--seeds", type=int, default=1, help="bisects per culprit (with --flake-rate)")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_kary.json")
    args = parser.parse_args()
    options = ProductOptions(strategy=args.strategy)
    cases = [tuple(int(x) for x in case.split(":")) for case in args.cases.split(",")]
    machine = machine_info()
    results = []
    print("| n | W | ceil(log_{W+1} n) | mean rounds | worst | rounds: culprits | mean runs | worst runs | correct |")
    print("| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for suspects, workers in cases:
        row = run_case(suspects, workers, options, args.flake_rate, args.seeds if args.flake_rate else 1)
        results.append(row)
        spread = row["rounds_histogram"]
        histogram = ", ".join(f"{r}: {c}" for r, c in spread.items()) if len(spread) <= 4 else "(in the JSON)"
        print(
            f"| {suspects} | {workers} | {row['ceil_log']} | {row['mean_rounds']:.3f} | {row['worst_rounds']} "
            f"| {histogram} | {row['mean_runs']:.2f} | {row['worst_runs']} | {row['correct']:.1%} |",
            flush=True,
        )
    parameters = {"strategy": args.strategy, "flake_rate": args.flake_rate, "seeds": args.seeds}
    write_results(args.out, {"machine": machine, **parameters, "cases": results})
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
