"""Time of `bisect explain` (the static diff) per commit over the recent history of one large repository.

    python benchmarks/bench_explain_timing.py --repo /tmp/cccl.git --commits 100

Runs explain() on each of the last N non-merge commits of HEAD (against its first parent) and prints the
repository's file count, the median, 90th percentile and maximum seconds per commit, and the slowest commits
with their changed-file counts. The repository must be a local clone (nothing is fetched). Each commit's CPU
seconds (this process and its git children) are kept beside its wall-clock seconds: on a shared host they tell a
slower program from a busier machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, cpu_seconds, machine_info, write_results

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_explain_timing.py` without PYTHONPATH

from bisector.analysis import explain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="A local (bare or not) clone.")
    parser.add_argument("--commits", type=int, default=100, help="How many recent non-merge commits.")
    parser.add_argument("--out", type=Path, help="Write the full result as JSON here.")
    args = parser.parse_args()
    git = ["git", f"--git-dir={args.repo}"] if args.repo.name.endswith(".git") else ["git", "-C", str(args.repo)]
    shas = subprocess.run([*git, "rev-list", "--no-merges", f"--max-count={args.commits}", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    files = len(subprocess.run([*git, "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True, text=True,
                               check=True).stdout.splitlines())  # fmt: skip
    rows = []
    for sha in shas:
        started, cpu_started = time.perf_counter(), cpu_seconds()
        diff = explain(args.repo, sha)
        rows.append({"commit": sha[:12], "seconds": round(time.perf_counter() - started, 3),
                     "cpu_seconds": round(cpu_seconds() - cpu_started, 3),
                     "files": diff.changed_file_count, "rows": len(diff.findings)})  # fmt: skip
    times = sorted(r["seconds"] for r in rows)
    cpu = sorted(r["cpu_seconds"] for r in rows)
    result = {
        "machine": machine_info(),
        "repo_files": files,
        "commits": len(rows),
        "seconds_median": times[len(times) // 2],
        "seconds_p90": times[int(len(times) * 0.9)],
        "seconds_max": times[-1],
        "over_2s": sum(1 for t in times if t > 2.0),
        "cpu_seconds_median": cpu[len(cpu) // 2],
        "cpu_seconds_p90": cpu[int(len(cpu) * 0.9)],
        "cpu_seconds_max": cpu[-1],
        "slowest": sorted(rows, key=lambda r: -r["seconds"])[:5],
        "rows": rows,
    }
    if args.out:
        write_results(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("rows", "machine")}, indent=1))


if __name__ == "__main__":
    main()
