"""Search runs with and without --prune auto, on three histories, each bisected by `bisect start` (a real process).

    python benchmarks/bench_prune.py [--cases demo,synthetic,self] [--self-repo /work/main] [--out FILE]

- demo: `bisect demo run` (kernels/demo*.py: a kernel stack whose churn is docs, other kernels, tuning rows).
- synthetic: 400 commits where 40 touch what the test runs (synthetic.prune_history; the test is a Python
  script that reads a JSON limit), culprit at commit 200.
- self: this project's own history (--self-repo, a clone of it): tests/test_module_sizes.py between 38629b2
  (passes) and 851d8c9 (fails: db/store.py grew past 400 lines at 093750f).
For each: search steps, probe steps, wall seconds, the culprit and whether it is the expected one; JSON in --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, BenchmarkError, command_line, machine_info, project_pythonpath, run_main, write_results

sys.path.insert(0, str(ROOT))  # this checkout's bisector, for the histories it writes

SELF_RANGE = ("38629b2", "851d8c9", "093750f")  # good, bad, the commit that made the test fail


def bisect(args: list[str], work: Path, label: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": project_pythonpath(), "BISECT_DATA_DIR": str(work / "data"),
           "BISECT_CACHE_DIR": str(work / "cache"), "BISECT_DB": f"sqlite:///{work / label}.db"}  # fmt: skip
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "bisector", *args, "--format", "json", "--no-explain"],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip
    wall_s = time.monotonic() - started
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise BenchmarkError(f"{label}: no JSON report (exit {done.returncode}): {done.stderr[-400:]}") from None
    pruning = report.get("pruning") or {}
    return {
        "search_steps": report["search_steps"],
        "probe_steps": report["side_runs"].get("probe", 0),
        "wall_s": round(wall_s, 2),
        "culprit": (report.get("first_bad") or {}).get("sha"),
        "pruned": sum(1 for c in pruning.get("commits", {}).values() if c["same_as"]),
        "pruning_note": pruning.get("note"),
    }


def both(args: list[str], work: Path, name: str, expected: str) -> dict[str, Any]:
    runs = {mode: bisect([*args, "--prune", mode], work, f"{name}-{mode}") for mode in ("off", "auto")}
    for mode, run in runs.items():
        run["culprit_ok"] = bool(run["culprit"]) and run["culprit"].startswith(expected)
        if not run["culprit_ok"]:
            raise BenchmarkError(f"{name} --prune {mode} named {run['culprit']}, expected {expected}")
    print(f"{name}: search steps {runs['off']['search_steps']} -> {runs['auto']['search_steps']} "
          f"(+{runs['auto']['probe_steps']} probe); {runs['auto']['pruning_note']}")  # fmt: skip
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="demo,synthetic,self")
    parser.add_argument("--self-repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--out", type=Path, default=Path("out/bench_prune.json"))
    options = parser.parse_args()
    results: dict[str, Any] = {"command": command_line("bench_prune.py", None), "machine": machine_info(),
                               "date": time.strftime("%Y-%m-%d"), "cases": {}}  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        cases = options.cases.split(",")
        if "demo" in cases:
            demo = work / "demo"
            from bisector.kernels.demo import init_demo_repo

            culprit = init_demo_repo(work / "demo-reference", 200, 0).culprit  # the same seed: the same SHAs
            results["cases"]["demo"] = both(["demo", "run", "--dir", str(demo)], work, "demo", culprit)
        if "synthetic" in cases:
            from synthetic import prune_history

            history = prune_history(work / "synthetic", 400, 40, 200)
            args = ["start", "--repo", str(history.path), "--good", history.shas[0], "--bad", history.shas[-1],
                    "--run", f"{sys.executable} bench.py"]  # fmt: skip
            results["cases"]["synthetic"] = both(args, work, "synthetic", history.shas[200])
        if "self" in cases:
            good, bad, culprit = SELF_RANGE
            run = f"{sys.executable} -m pytest -q -p no:cacheprovider tests/test_module_sizes.py"
            args = ["start", "--repo", str(options.self_repo), "--good", good, "--bad", bad, "--run", run]
            results["cases"]["self"] = both(args, work, "self", culprit)
    write_results(options.out, results)
    return 0


if __name__ == "__main__":
    run_main(main, "bench_prune")
