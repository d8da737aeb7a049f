"""Wall time to the culprit with and without images built ahead (`--build-ahead`), at --workers 1 on venv images.

    python benchmarks/bench_build_ahead.py [--commits 64] [--build-s 2] [--test-s 2] [--culprits 3] [--ahead 0 2]
        [--executor local|ray] [--out FILE]

A synthetic history whose every commit is its own image (the build sleeps --build-s, then copies the commit's value
into its build output; the test sleeps --test-s and fails from the culprit on) is bisected with `bisect start
--image venv --workers 1` as a user runs it, once per --ahead value (--build-ahead N; 0: none, 2: the default),
per culprit, each on a fresh image cache; with `--executor ray` on a local Ray cluster that each bisect starts (its
builds ahead then run in the slot's actor). Reports wall time, the builds the steps waited for and the builds made
in all.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine_info, project_pythonpath, write_results

BUILD = 'echo "$BISECT_SHA" >> "$BUILD_COUNTER"; sleep "$BUILD_S"; cp value built'
TEST = 'sleep "$TEST_S"; [ "$(cat built)" = ok ]'


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_history(repo: Path, commits: int, culprit: int) -> list[str]:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "b@example.org")
    git(repo, "config", "user.name", "bench")
    shas = []
    for index in range(commits):
        (repo / "value").write_text("ok\n" if index < culprit else "broken\n")
        (repo / "revision").write_text(f"{index}\n")  # every commit its own tree: its own image
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"revision {index}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def bisect(repo: Path, shas: list[str], work: Path, build_ahead: int, args: argparse.Namespace) -> dict[str, object]:
    counter = work / f"builds-{build_ahead}"
    env = {
        **os.environ, "PYTHONPATH": project_pythonpath(), "BISECT_DB": f"sqlite:///{work / f'b{build_ahead}.db'}",
        "BISECT_DATA_DIR": str(work / "data"), "BISECT_CACHE_DIR": str(work / f"cache-{build_ahead}"),
        "BISECT_GPUS": "", "BISECT_GPU_LOCK_DIR": str(work / "locks"),
    }  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bisector", "start", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1],
         "--build", BUILD, "--run", TEST, "--image", "venv", "--workers", "1", "--no-explain", "--format", "json",
         "--executor", args.executor,
         "--build-ahead", str(build_ahead), "--env", f"BUILD_COUNTER={counter}",
         "--env", f"BUILD_S={args.build_s}", "--env", f"TEST_S={args.test_s}"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall_s = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"bisect failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    steps = report["steps"]
    return {
        "wall_s": round(wall_s, 2),
        "first_bad": report["first_bad"]["sha"],
        "steps": len(steps),
        "steps_that_built": sum(1 for s in steps if s["image"]["source"] == "built"),
        "builds": len(counter.read_text().splitlines()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=64)
    parser.add_argument("--build-s", type=float, default=2.0)
    parser.add_argument("--test-s", type=float, default=2.0)
    parser.add_argument("--culprits", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ahead", type=int, nargs="+", default=[0, 2], help="--build-ahead values to compare.")
    parser.add_argument("--executor", choices=["local", "ray"], default="local")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    runs: list[dict[str, object]] = []
    for culprit in sorted(rng.sample(range(1, args.commits), args.culprits)):
        with tempfile.TemporaryDirectory(prefix="bench-build-ahead-") as tmp:
            work = Path(tmp)
            shas = make_history(work / "repo", args.commits, culprit)
            for build_ahead in args.ahead:
                result = bisect(work / "repo", shas, work, build_ahead, args)
                assert result["first_bad"] == shas[culprit], result
                runs.append({"culprit": culprit, "build_ahead": build_ahead, **result})
                print(json.dumps(runs[-1]), flush=True)
    summary = {}
    for build_ahead in args.ahead:
        mine = [r for r in runs if r["build_ahead"] == build_ahead]
        summary[f"build_ahead={build_ahead}"] = {
            key: statistics.median(float(r[key]) for r in mine)  # type: ignore[arg-type]
            for key in ("wall_s", "steps", "steps_that_built", "builds")
        }
    print(json.dumps(summary, indent=1))
    if args.out:
        results = {"parameters": vars(args) | {"out": str(args.out)}, "machine": machine_info(), "runs": runs,
                   "median": summary}  # fmt: skip
        write_results(args.out, results)


if __name__ == "__main__":
    main()
