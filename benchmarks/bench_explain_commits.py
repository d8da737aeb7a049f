"""CPU and wall seconds of `bisect explain`'s static diff on chosen commits, best and median of several runs.

    python benchmarks/bench_explain_commits.py --code . --runs 5 REPO[@REV] ... [--out FILE]

Loads the static diff from --code (a checkout of gpu-bisect, so that two versions of the code can be timed in
two processes on the same commits) and diffs each REV (default HEAD) of each local clone against its first
parent, once to warm the imports and then --runs times. CPU seconds are this process's and its git children's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from common import cpu_seconds, write_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", help="REPO[@REV]: a local clone (bare or not) and a revision.")
    parser.add_argument("--code", type=Path, required=True, help="The gpu-bisect checkout whose analysis is timed.")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    from bisector.analysis import explain

    rows = []
    for target in args.targets:
        repo, _, rev = target.partition("@")
        explain(repo, rev or "HEAD")
        cpu, wall, found = [], [], 0
        for _ in range(args.runs):
            started, cpu_started = time.perf_counter(), cpu_seconds()
            found = len(explain(repo, rev or "HEAD").findings)
            wall.append(time.perf_counter() - started)
            cpu.append(cpu_seconds() - cpu_started)
        rows.append({"target": target, "rows": found, "cpu_best": round(min(cpu), 3),
                     "cpu_median": round(statistics.median(cpu), 3), "wall_best": round(min(wall), 3),
                     "wall_median": round(statistics.median(wall), 3)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        write_results(args.out, {"code": str(args.code), "runs": args.runs, "rows": rows})


if __name__ == "__main__":
    main()
