"""Wall time to the culprit with images built ahead of their steps, side by side with `git bisect run`.

    python benchmarks/bench_build_ahead.py [--commits 200] [--culprits 137] [--cases 2:1,4:2]
        [--runs git,w1,w1-images,w4-images,w8-images] [--slots N] [--executor local|ray] [--out FILE]

A synthetic history of --commits + 1 commits (n = --commits suspects), every commit its own image: the build
writes the commit's value into its build output, then sleeps BUILD_S; the test sleeps TEST_S and fails from the
culprit on. Each case BUILD_S:TEST_S is bisected, as a user runs it, by each of --runs:

* git: `git bisect run` of the build then the test, in the repository.
* wN: `bisect start --workers N`, the build then the test in each step's worktree (no images).
* wN-images: `bisect start --image venv --workers N`, images built ahead with the default --build-ahead
  (wN-images-aheadK: --build-ahead K).

Every run gets a fresh store and image cache and must name the planted culprit. --slots sets
$BISECT_BUILD_AHEAD_SLOTS (how many builds ahead run at once on the host; unset: the host's default, one per 16
CPUs, at least 2): the builds here are sleeps, so a small host can stand for one with a CPU per build. Reports
the wall time (spawn to exit), the speed-up against git's, the steps, those that built their own image, those
tested on an image built ahead, and the builds made in all. The build writes its output before its sleep (what a
build wrote in its last 2 s is read again at each check of its image: workers/images/contents.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import machine_info, project_pythonpath, write_results

BUILD = 'echo "$BISECT_SHA" >> "$BUILD_COUNTER"; cp value built; sleep "$BUILD_S"'
TEST = 'sleep "$TEST_S"; [ "$(cat built)" = ok ]'
RUN = re.compile(r"^(?:git|w(\d+)(-images(?:-ahead(\d+))?)?)$")


@dataclass(frozen=True)
class Case:
    build_s: float
    test_s: float

    @property
    def name(self) -> str:
        return f"build {self.build_s:g} s, test {self.test_s:g} s"


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env)
    return done.stdout.strip()


def make_history(repo: Path, commits: int, culprit: int) -> list[str]:
    """commits commits, oldest first; those from culprit on are bad."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "b@example.org")
    git(repo, "config", "user.name", "bench")
    (repo / ".gitignore").write_text("built\n")
    shas = []
    for index in range(commits):
        (repo / "value").write_text("ok\n" if index < culprit else "broken\n")
        (repo / "revision").write_text(f"{index}\n")  # every commit its own tree: its own image
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"revision {index}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def bisect_env(work: Path, name: str, case: Case, slots: int | None) -> dict[str, str]:
    env = {
        **os.environ, "PYTHONPATH": project_pythonpath(), "BISECT_DB": f"sqlite:///{work / f'{name}.db'}",
        "BISECT_DATA_DIR": str(work / f"data-{name}"), "BISECT_CACHE_DIR": str(work / f"cache-{name}"),
        "BISECT_GPUS": "", "BISECT_GPU_LOCK_DIR": str(work / f"locks-{name}"),
        "BUILD_COUNTER": str(work / f"builds-{name}"), "BUILD_S": f"{case.build_s:g}", "TEST_S": f"{case.test_s:g}",
    }  # fmt: skip
    if slots is not None:
        env["BISECT_BUILD_AHEAD_SLOTS"] = str(slots)
    return env


def run_git(repo: Path, shas: list[str], env: dict[str, str]) -> dict[str, object]:
    script = repo.parent / "step.sh"
    script.write_text(f"{BUILD}\n{TEST}\n")
    started = time.monotonic()
    git(repo, "bisect", "start", shas[-1], shas[0], env=env)
    try:
        git(repo, "bisect", "run", "bash", str(script), env=env)
        wall_s = time.monotonic() - started
        first_bad = git(repo, "rev-parse", "refs/bisect/bad")
        steps = sum(1 for line in git(repo, "bisect", "log").splitlines() if re.match(r"git bisect (good|bad)", line))
    finally:
        git(repo, "bisect", "reset")
    return {"wall_s": round(wall_s, 2), "first_bad": first_bad, "steps": steps}


def run_bisect(repo: Path, shas: list[str], run: str, env: dict[str, str], executor: str) -> dict[str, object]:
    match = RUN.match(run)
    assert match is not None
    workers, images, ahead = match.group(1), match.group(2), match.group(3)
    assert workers is not None
    args = [
        sys.executable, "-m", "bisector", "start", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1],
        "--build", BUILD, "--run", TEST, "--workers", workers, "--executor", executor, "--no-explain",
        "--format", "json",
    ]  # fmt: skip
    if images:
        args += ["--image", "venv"]
    if ahead is not None:
        args += ["--build-ahead", ahead]
    started = time.monotonic()
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    wall_s = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{run} failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    steps = report["steps"]
    ahead_used = set(report.get("built_ahead", ())) & {s["sha"] for s in steps}
    return {
        "wall_s": round(wall_s, 2),
        "first_bad": report["first_bad"]["sha"],
        "steps": len(steps),
        "steps_that_built": sum(1 for s in steps if (s.get("image") or {}).get("source") == "built"),
        "steps_on_images_built_ahead": len(ahead_used),
        "built_ahead": len(report.get("built_ahead", ())),
        "note": next((line for line in done.stderr.splitlines() if "built ahead of their steps this run" in line), ""),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=200, help="suspects: the history has one commit more")
    parser.add_argument("--culprits", default="137", help="comma-separated indexes of the first bad commit")
    parser.add_argument("--cases", default="2:1,4:2", help="comma-separated BUILD_S:TEST_S pairs")
    parser.add_argument("--runs", default="git,w1,w1-images,w4-images,w8-images")
    parser.add_argument("--slots", type=int, help="$BISECT_BUILD_AHEAD_SLOTS (unset: the host's default)")
    parser.add_argument("--executor", choices=["local", "ray"], default="local")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cases = [Case(*(float(x) for x in pair.split(":"))) for pair in args.cases.split(",")]
    runs = args.runs.split(",")
    if bad := [run for run in runs if not RUN.match(run)]:
        raise SystemExit(f"unknown runs {bad}: git, wN, wN-images or wN-images-aheadK")
    results: list[dict[str, object]] = []
    for culprit in (int(c) for c in args.culprits.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-build-ahead-") as tmp:
            work = Path(tmp)
            shas = make_history(work / "repo", args.commits + 1, culprit)
            for case in cases:
                git_wall = None
                for run in runs:
                    name = f"{run}-{case.build_s:g}-{case.test_s:g}"
                    env = bisect_env(work, name, case, args.slots)
                    if run == "git":
                        result = run_git(work / "repo", shas, env)
                    else:
                        result = run_bisect(work / "repo", shas, run, env, args.executor)
                    assert result["first_bad"] == shas[culprit], (run, result)
                    counter = Path(env["BUILD_COUNTER"])
                    result["builds"] = len(counter.read_text().splitlines()) if counter.exists() else 0
                    if run == "git":
                        git_wall = float(result["wall_s"])  # type: ignore[arg-type]
                    if git_wall:
                        result["speedup_vs_git"] = round(git_wall / float(result["wall_s"]), 2)  # type: ignore[arg-type]
                    results.append({"case": case.name, "culprit": culprit, "run": run, **result})
                    print(json.dumps(results[-1]), flush=True)
    print_table(results, runs)
    if args.out:
        command = " ".join(shlex.quote(a) for a in sys.argv)
        write_results(args.out, {"parameters": vars(args) | {"out": str(args.out)}, "command": command,
                                 "machine": machine_info(), "runs": results})  # fmt: skip


def print_table(results: list[dict[str, object]], runs: list[str]) -> None:
    print("| | " + " | ".join(runs) + " |")
    for case in dict.fromkeys(str(r["case"]) for r in results):
        cells = []
        for run in runs:
            mine = [r for r in results if r["case"] == case and r["run"] == run]
            cells.append(
                " / ".join(
                    f"{r['wall_s']} s"
                    + (f" ({r['speedup_vs_git']}x)" if "speedup_vs_git" in r and run != "git" else "")
                    for r in mine
                )
            )
        print(f"| {case} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
