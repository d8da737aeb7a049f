"""Quarantine benchmark: does the worker health check set aside broken workers and only them?

    python benchmarks/bench_quarantine.py [--bisects 200] [--first-seed 100000] [--flakes 0.1,0.2] \
        [--workers 2,4] [--faults none,fails,passes,inverts,mostly-fails] [--processes 1] [--out FILE.json]

Each cell bisects `--bisects` simulated histories through the coordinator's own decision core
(benchmarks/simulate_core.py) as `bisect start --strategy noisy --workers W` runs them: seed s draws the history
(16..128 suspects, the culprit uniform among them) and, with a fault, which worker is broken; every run at every
worker flakes (reports the other state) with the cell's probability; the broken worker's runs then go wrong as
its fault says (`simulate_core.WorkerFault`). Seeds first-seed .. first-seed + bisects - 1; the rule was tuned on
seeds 0..199, so reported numbers use others (the default).

Reported per cell: bisects in which a healthy worker was quarantined, bisects that ended `failed` (every worker
quarantined), bisects in which the broken worker was quarantined, wrong answers (a named commit or range without
the culprit), not reproducible, mean runs, mean reference runs (the health check's own), mean rounds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_quarantine.py` without PYTHONPATH

from simulate import History, SimStatus  # noqa: E402
from simulate_core import ProductOptions, WorkerFault, simulate_core  # noqa: E402

NO_FAULT = "none"
MAX_RUNS = 5000


@dataclass(frozen=True)
class Cell:
    flake_rate: float
    workers: int
    fault: str  # a WorkerFault's value, or NO_FAULT

    @property
    def name(self) -> str:
        return f"flake {self.flake_rate:g}, W={self.workers}, broken: {self.fault}"


@dataclass(frozen=True)
class CellResult:
    cell: str
    bisects: int
    healthy_quarantined: int  # bisects in which a healthy worker was quarantined
    failed: int  # bisects that ended `failed`: every worker quarantined
    broken_caught: int  # bisects in which the broken worker was quarantined
    wrong: int
    not_reproducible: int
    runs_mean: float
    reference_runs_mean: float
    rounds_mean: float


def bisect_once(cell: Cell, seed: int) -> tuple[int, bool, bool, bool, bool, int, int, int]:
    """(healthy workers quarantined, failed, broken caught, wrong, not reproducible, runs, reference runs, rounds)."""
    rng = random.Random(seed)
    suspects = rng.randint(16, 128)
    history = History(suspects + 1, rng.randint(1, suspects), flake_rate=cell.flake_rate)
    broken = f"sim-{rng.randrange(cell.workers)}" if cell.fault != NO_FAULT else None
    faults = {broken: WorkerFault(cell.fault)} if broken else {}
    result = simulate_core(
        history, ProductOptions(strategy="noisy"), slots=cell.workers, seed=seed, max_runs=MAX_RUNS, faults=faults
    )
    named = result.status in (SimStatus.FOUND, SimStatus.AMBIGUOUS)
    return (
        len([w for w in result.quarantined if w != broken]),
        result.status is SimStatus.FAILED,
        broken in result.quarantined,
        named and not result.correct,
        result.status is SimStatus.NOT_REPRODUCIBLE,
        result.runs,
        result.reference_runs,
        result.rounds,
    )


def run_cell(task: tuple[Cell, int, int]) -> CellResult:
    cell, first_seed, bisects = task
    rows = [bisect_once(cell, seed) for seed in range(first_seed, first_seed + bisects)]
    return CellResult(
        cell=cell.name,
        bisects=bisects,
        healthy_quarantined=sum(1 for r in rows if r[0]),
        failed=sum(r[1] for r in rows),
        broken_caught=sum(r[2] for r in rows),
        wrong=sum(r[3] for r in rows),
        not_reproducible=sum(r[4] for r in rows),
        runs_mean=statistics.fmean(r[5] for r in rows),
        reference_runs_mean=statistics.fmean(r[6] for r in rows),
        rounds_mean=statistics.fmean(r[7] for r in rows),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bisects", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=100_000)
    parser.add_argument("--flakes", default="0.1,0.2")
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--faults", default=",".join([NO_FAULT, *WorkerFault]))
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    cells = [
        Cell(float(flake), int(workers), fault)
        for fault in args.faults.split(",")
        for flake in args.flakes.split(",")
        for workers in args.workers.split(",")
    ]
    for cell in cells:
        if cell.fault != NO_FAULT:
            WorkerFault(cell.fault)  # an unknown fault is an error before any bisect runs
    tasks = [(cell, args.first_seed, args.bisects) for cell in cells]
    if args.processes > 1:
        with multiprocessing.Pool(args.processes) as pool:
            results = pool.map(run_cell, tasks)
    else:
        results = [run_cell(task) for task in tasks]
    print(
        "| cell | healthy quarantined | failed | broken caught | wrong | not reproducible | runs | reference runs | "
        "rounds |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for r in results:
        caught = "-" if r.cell.endswith(NO_FAULT) else str(r.broken_caught)
        print(
            f"| {r.cell} | {r.healthy_quarantined} | {r.failed} | {caught} | {r.wrong} | {r.not_reproducible} | "
            f"{r.runs_mean:.1f} | {r.reference_runs_mean:.1f} | {r.rounds_mean:.1f} |"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"args": vars(args) | {"out": str(args.out)}, "cells": [asdict(r) for r in results]}, indent=1)
        )


if __name__ == "__main__":
    main()
