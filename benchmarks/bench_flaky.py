"""Real bisects of a test with one-sided flakes: good commits fail 25 % of their runs at random, bad ones always.

    python benchmarks/bench_flaky.py [--bisects 20] [--commits 120] [--culprit 113] [--workers 1] [--out FILE]
                                     [--start-arg=--strategy --start-arg=noisy ...]

Each bisect is a real `python -m bisector start` subprocess, with the product's defaults (no --strategy, no
--repeat: one run per commit, as git bisect run) or the --start-arg options given, on a fresh synthetic
history (synthetic) of --commits suspects whose first bad commit is at --culprit; the run command is
the history's `test.sh` followed by a 1-in-4 random failure. Reported: how many bisects named the culprit,
how each one ended, and the median (and max) number of test runs. #14's target: at least 19 of 20 right.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_flaky.py` without PYTHONPATH

from synthetic import culprit_history  # noqa: E402

from benchmarks.common import machine_info, project_pythonpath, write_results  # noqa: E402

FLAKY_RUN = "bash test.sh && [ $((RANDOM % 4)) -ne 0 ]"  # a good commit fails one run in four


def one_bisect(
    work: Path, index: int, commits: int, culprit: int, workers: int, start_args: list[str]
) -> dict[str, Any]:
    history = culprit_history(work / f"repo-{index}", commits, culprit)
    env_dirs = {"BISECT_DATA_DIR": str(work / f"data-{index}"), "BISECT_CACHE_DIR": str(work / f"cache-{index}")}
    command = [sys.executable, "-m", "bisector", "start", "--repo", str(history.path), "--good", history.shas[0],
               "--bad", "main", "--run", FLAKY_RUN, "--workers", str(workers), "--no-explain", "--format", "json",
               "--db", f"sqlite:///{work / f'store-{index}.db'}", *start_args]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT, env=_env(env_dirs))
    wall_s = time.monotonic() - started
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"status": f"exit {done.returncode}", "right": False, "runs": 0, "wall_s": wall_s,
                "error": done.stderr.strip().splitlines()[-1:] }  # fmt: skip
    first_bad = (report.get("first_bad") or {}).get("sha")
    runs = sum(1 for step in report.get("steps", []) if step.get("verdict") not in (None, "cancelled"))
    return {
        "status": report.get("status"),
        "right": first_bad == history.shas[history.first_bad],
        "runs": runs,
        "wall_s": round(wall_s, 2),
    }


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra, "PYTHONPATH": project_pythonpath()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bisects", type=int, default=20)
    parser.add_argument("--commits", type=int, default=120)
    parser.add_argument("--culprit", type=int, default=113)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--start-arg", action="append", default=[], help="an option added to every bisect start")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        results = []
        for index in range(args.bisects):
            result = one_bisect(Path(scratch), index, args.commits, args.culprit, args.workers, args.start_arg)
            results.append(result)
            print(f"{index + 1:>3}/{args.bisects} {result['status']:<20} right={result['right']} "
                  f"runs={result['runs']} wall={result['wall_s']}s", file=sys.stderr)  # fmt: skip
    runs = [r["runs"] for r in results]
    summary = {
        "bisects": args.bisects,
        "commits": args.commits,
        "culprit": args.culprit,
        "workers": args.workers,
        "start_args": args.start_arg,
        "right": sum(r["right"] for r in results),
        "outcomes": dict(Counter(str(r["status"]) for r in results)),
        "runs": {"median": statistics.median(runs), "max": max(runs)},
        "results": results,
        "machine": machine_info(),
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}, indent=2))
    if args.out:
        write_results(args.out, summary)


if __name__ == "__main__":
    main()
