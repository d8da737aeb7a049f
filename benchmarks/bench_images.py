"""Worker images: what a second bisect, an ad hoc run and an adjacent commit's build cost.

A synthetic C project (--files C files of generated functions compiled at -O2 with `$CC`, a Python package
installed into the image's venv with `uv pip install`), --commits commits each editing one C file, a planted
culprit. Measured, each in a fresh cache and data dir:

1. Two `bisect start --image venv` over the same range (real CLI subprocesses, local executor): the builds each
   ran (a counter the build appends to) and the walls. Target: the second builds nothing.
2. Preparing the image of an already built commit (`ImageBuilder.prepare`: key, manifest, lock, touch) against
   that image's build time; and `bisect run-at` at that commit end to end. Target: preparing < 2 % of the build.
3. A clean build (compiler cache off) at commit k, then, with the cache warmed by commit k, the build of commit
   k+1 (one C file changed). Target: the adjacent build < 30 % of the clean one.
4. The image of 2. copied into another cache root (another node's, without a shared root: workers/images/transfer.py,
   the holder's side in process) against its build, and the copy's test run. Target: the copy < 50 % of the build.

python benchmarks/bench_images.py [--files 24] [--functions 150] [--commits 12] [--out FILE.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, capture, load_average, machine_info, project_pythonpath, write_results

BUILD = """#!/usr/bin/env bash
set -e
echo "build at $(cat version)" >> "${BUILD_COUNTER:-/dev/null}"
uv pip install --quiet --offline --no-deps --no-build-isolation -e ./pkg
mkdir -p obj
for f in src/*.c; do $CC -c -O2 -fPIC -o "obj/$(basename "$f" .c).o" "$f"; done
$CC -shared -o libbench.so obj/*.o
"""
TEST = """#!/usr/bin/env bash
exec python -c "import ctypes, benchpkg; print('metric:', ctypes.CDLL('./libbench.so').value())"
"""
PYPROJECT = '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n' \
    '[project]\nname = "benchpkg"\nversion = "0.1"\n'  # fmt: skip


def c_file(index: int, functions: int, salt: int) -> str:
    body = [
        f"double f{index}_{j}(double x) {{ double s = {salt}; for (int i = 0; i < {j + 8}; i++) "
        f"{{ s += x * i / (i + {j + 1}.0); if (s > 1e9) s -= x; }} return s; }}"
        for j in range(functions)
    ]
    return "\n".join(body) + "\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: int, functions: int, commits: int, culprit: int) -> list[str]:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "b@example.org")
    git(path, "config", "user.name", "bench")
    (path / "src").mkdir()
    (path / "pkg" / "benchpkg").mkdir(parents=True)
    (path / "pkg" / "pyproject.toml").write_text(PYPROJECT)
    (path / "pkg" / "benchpkg" / "__init__.py").write_text("")
    (path / "build.sh").write_text(BUILD)
    (path / "test.sh").write_text(TEST)
    for index in range(files):
        (path / "src" / f"f{index}.c").write_text(c_file(index, functions, 0))
    shas = []
    for number in range(commits + 1):
        if number:
            index = number % files
            (path / "src" / f"f{index}.c").write_text(c_file(index, functions, number))
        value = 5 if number >= culprit else 10
        (path / "src" / "value.c").write_text(f"int value(void) {{ return {value}; }}\n")
        (path / "version").write_text(f"{number}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"commit {number}")
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas


def fresh_env(base: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": project_pythonpath(), "BISECT_CACHE_DIR": str(base / "cache"),
            "BISECT_DATA_DIR": str(base / "data"), "BISECT_GPUS": "", **extra}  # fmt: skip


def two_bisects(work: Path, repo: Path, shas: list[str]) -> dict[str, Any]:
    counter = work / "bisect-builds"
    env = fresh_env(work / "bisects", BUILD_COUNTER=str(counter), BISECT_DB=f"sqlite:///{work / 'bisect.db'}")
    runs = []
    for _ in range(2):
        before = len(counter.read_text().splitlines()) if counter.exists() else 0
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "bisector", "start", "--repo", str(repo), "--good", shas[0], "--bad", "main",
             "--build", "bash build.sh", "--run", "bash test.sh", "--metric", r"metric: ([0-9.]+)",
             "--expect", ">= 8", "--image", "venv", "--format", "json"],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        wall = time.monotonic() - started
        if done.returncode != 0:
            sys.exit(f"bisect failed: {done.stderr[-2000:]}")
        report = json.loads(done.stdout)
        after = len(counter.read_text().splitlines())
        steps = [s for s in report["steps"] if s.get("image")]
        runs.append({
            "wall_s": round(wall, 2), "builds": after - before, "steps": len(steps),
            "reused_steps": sum(1 for s in steps if s["image"]["reused"]), "first_bad": report["first_bad"]["sha"],
        })  # fmt: skip
    return {"runs": runs, "target": "the second bisect builds nothing", "met": runs[1]["builds"] == 0}


def prepare_cost(work: Path, repo: Path, sha: str) -> dict[str, Any]:
    from bisector.vocab.metric import Expectation, MetricSpec
    from bisector.workers.executor import StepRequest
    from bisector.workers.images.builder import BuildJob, ImageBuilder
    from bisector.workers.images.cache import ImageCache
    from bisector.workers.images.key import ImageRecipe
    from bisector.workers.output import StepLog
    from bisector.workers.step import StepRunner, WorkerSlot

    cache = ImageCache(work / "prepare" / "cache" / "images")  # where fresh_env(work / "prepare") puts images
    os.environ["BISECT_CACHE_DIR"] = str(work / "prepare" / "cache")
    recipe = ImageRecipe("venv")
    request = StepRequest(
        step_id=1, bisect_id=1, sha=sha, attempt=1, repo=str(repo), run_cmd="bash test.sh",
        build_cmd="bash build.sh", metric=MetricSpec(regex=r"metric: ([0-9.]+)", expect=Expectation.parse(">= 8")),
        log_path=str(work / "prepare" / "step.log"), timeout_s=3600, image=recipe,
    )  # fmt: skip
    built = StepRunner(WorkerSlot("w", (), work / "prepare" / "wt")).run(request)
    assert built.image is not None, built.detail
    assert built.image.source == "built", built.detail
    samples = []
    with (work / "prepare" / "prepare.log").open("ab") as log_file:
        log = StepLog(log_file)
        for _ in range(20):
            job = BuildJob(str(repo), sha, "bash build.sh", recipe, dict(os.environ), log, 3600)
            started = time.perf_counter()
            with ImageBuilder(cache).prepare(job) as prepared:
                samples.append(time.perf_counter() - started)
                assert prepared.info is not None
                assert prepared.info.reused
    samples.sort()
    median = samples[len(samples) // 2]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bisector", "run-at", sha, "--repo", str(repo), "--build", "bash build.sh",
         "--run", "bash test.sh", "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", "--format", "json",
         "--executor", "inprocess"],
        env=fresh_env(work / "prepare", BISECT_DB=f"sqlite:///{work / 'prepare.db'}"), capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    run_at_wall = time.monotonic() - started
    run_at = json.loads(done.stdout)
    return {
        "build_s": round(built.image.build_s, 3), "prepare_median_s": round(median, 5),
        "prepare_max_s": round(samples[-1], 5), "prepare_pct_of_build": round(100 * median / built.image.build_s, 3),
        "run_at_wall_s": round(run_at_wall, 2), "run_at_image": run_at["image"],
        "target": "preparing a built commit's image < 2 % of its build", "met": median < 0.02 * built.image.build_s,
    }  # fmt: skip


def copy_cost(work: Path, repo: Path, sha: str, build_s: float) -> dict[str, Any]:
    """The image prepare_cost built at sha, copied from its root into another node's."""
    from bisector.vocab.domain import Verdict
    from bisector.vocab.metric import Expectation, MetricSpec
    from bisector.workers.executor import StepRequest
    from bisector.workers.images.cache import ImageCache
    from bisector.workers.images.key import ImageRecipe
    from bisector.workers.images.transfer import CacheHolder
    from bisector.workers.step import StepRunner, WorkerSlot

    holder = CacheHolder(ImageCache(work / "prepare" / "cache" / "images"))
    request = StepRequest(
        step_id=1, bisect_id=1, sha=sha, attempt=1, repo=str(repo), run_cmd="bash test.sh",
        build_cmd="bash build.sh", metric=MetricSpec(regex=r"metric: ([0-9.]+)", expect=Expectation.parse(">= 8")),
        log_path=str(work / "other" / "step.log"), timeout_s=3600, image=ImageRecipe("venv"),
    )  # fmt: skip
    runner = StepRunner(WorkerSlot("w", (), work / "other" / "wt"), image_root=work / "other" / "images")
    started = time.monotonic()
    copied = runner.run(request, image_peer=holder)
    step_s = time.monotonic() - started
    assert copied.image is not None, copied.detail
    assert copied.image.source == "copied", Path(copied.log_path).read_text()[-2000:]
    assert copied.verdict in (Verdict.GOOD, Verdict.BAD), copied.detail
    return {
        "build_s": round(build_s, 3), "copy_s": round(copied.image.build_s, 3), "step_s": round(step_s, 3),
        "size_bytes": copied.image.size_bytes, "copy_pct_of_build": round(100 * copied.image.build_s / build_s, 1),
        "mib_per_s": round(copied.image.size_bytes / (1 << 20) / copied.image.build_s, 1),
        "verdict": copied.verdict.value,
        "target": "copying an image another node holds < 50 % of its build",
        "met": copied.image.build_s < 0.5 * build_s,
    }  # fmt: skip


def adjacent_build(work: Path, repo: Path, shas: list[str], k: int) -> dict[str, Any]:
    from bisector.workers.step import StepRunner, WorkerSlot

    def build(sha: str, root: str, step: int, **env: str) -> float:
        from bisector.vocab.metric import MetricSpec
        from bisector.workers.executor import StepRequest
        from bisector.workers.images.key import ImageRecipe

        os.environ["BISECT_CACHE_DIR"] = str(work / root)
        request = StepRequest(
            step_id=step, bisect_id=1, sha=sha, attempt=1, repo=str(repo), run_cmd="true", build_cmd="bash build.sh",
            metric=MetricSpec(), log_path=str(work / root / f"step-{step}.log"), timeout_s=3600, env=env,
            image=ImageRecipe("venv"),
        )  # fmt: skip
        result = StepRunner(WorkerSlot("w", (), work / root / "wt")).run(request)
        assert result.image is not None, result.detail
        assert result.image.source == "built", result.detail
        return result.image.build_s

    clean = build(shas[k], "clean", 1, CCACHE_DISABLE="1")
    warm_up = build(shas[k], "cached", 2)
    adjacent = build(shas[k + 1], "cached", 3)
    return {
        "clean_build_s": round(clean, 3), "cold_cache_build_s": round(warm_up, 3),
        "adjacent_build_s": round(adjacent, 3), "adjacent_pct_of_clean": round(100 * adjacent / clean, 1),
        "target": "an adjacent commit's build with the compiler cache < 30 % of a clean build",
        "met": adjacent < 0.3 * clean,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--functions", type=int, default=150)
    parser.add_argument("--commits", type=int, default=12)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_images.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-images-") as tmp:
        work = Path(tmp)
        repo = work / "repo"
        culprit = args.commits * 2 // 3
        shas = make_repo(repo, args.files, args.functions, args.commits, culprit)
        results = {
            "machine": machine_info(), "load_before": load_average(),
            "versions": {"uv": capture("uv", "--version"), "ccache": capture("ccache", "--version").splitlines()[0]},
            "params": vars(args) | {"out": str(args.out)},
            "adjacent": adjacent_build(work, repo, shas, args.commits // 2),
            "prepare": prepare_cost(work, repo, shas[1]),
            "bisects": two_bisects(work, repo, shas),
            "load_after": load_average(),
        }  # fmt: skip
        results["bisects"]["planted"] = shas[culprit]
        results["copy"] = copy_cost(work, repo, shas[1], results["prepare"]["build_s"])
    write_results(args.out, results)
    print(json.dumps({k: results[k] for k in ("adjacent", "prepare", "copy", "bisects")}, indent=2))


if __name__ == "__main__":
    main()
