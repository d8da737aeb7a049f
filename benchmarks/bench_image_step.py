"""What a worker image costs a step beside its build command and its test: a build's own work, a reuse.

    python benchmarks/bench_image_step.py [--images 40] [--files 2000] [--build-s 0] [--reuses 10] [--out FILE]

A repository whose tree holds --files small files; --images commits, each its own image (`--image venv`), built in a
fresh cache root by `ImageBuilder.prepare` with a build command that sleeps --build-s, then writes its output (a
copied file), as a real build writes its outputs last. A build's own work is its wall less --build-s: the export,
the venv, the record of what the image holds (workers/images/contents.py), the size cap's pass over every image
(workers/images/cache.py). Then, with every image made: one pass of the cap alone, and steps on --reuses ready
images, each `prepare` (manifest, lock, the check of the image's contents) and its private copy (run_copy.py, made
and removed) after a sync, so that the builds' writes do not slow the copies. Medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import load_average, machine_info, write_results


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: int, commits: int) -> list[str]:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "b@example.org")
    git(path, "config", "user.name", "bench")
    for index in range(files):
        (path / "src" / f"d{index % 50}").mkdir(parents=True, exist_ok=True)
        (path / "src" / f"d{index % 50}" / f"f{index}.py").write_text(f"VALUE = {index}\n" * 5)
    shas = []
    for index in range(commits):
        (path / "value").write_text(f"{index}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"revision {index}")
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas


BUILD = 'sleep "$BUILD_S"; cp value built'


def median_ms(samples: list[float]) -> float:
    return round(1000 * statistics.median(samples), 1)


def measure(work: Path, files: int, images: int, build_s: float, reuses: int) -> dict[str, Any]:
    from bisector.workers.images.builder import BuildJob, ImageBuilder
    from bisector.workers.images.cache import ImageCache
    from bisector.workers.images.key import ImageRecipe
    from bisector.workers.images.run_copy import private_copy
    from bisector.workers.output import StepLog

    shas = make_repo(work / "repo", files, images)
    cache = ImageCache(work / "images")
    builder = ImageBuilder(cache)
    recipe = ImageRecipe("venv")
    log_file = (work / "steps.log").open("ab")
    log = StepLog(log_file)

    def step(sha: str) -> tuple[float, float]:
        """The prepare's wall and the private copy's (made and removed)."""
        job = BuildJob(str(work / "repo"), sha, BUILD, recipe, {**os.environ, "BUILD_S": str(build_s)}, log, 3600)
        started = time.perf_counter()
        with builder.prepare(job) as prepared:
            prepared_s = time.perf_counter() - started
            assert prepared.ready, prepared.error or prepared.failed_build
            started = time.perf_counter()
            with private_copy(prepared):
                pass
            return prepared_s, time.perf_counter() - started

    builds = [step(sha)[0] - build_s for sha in shas]
    started = time.perf_counter()
    cache.evict(1 << 62)
    cap_pass_s = time.perf_counter() - started
    os.sync()
    reused = [step(sha) for sha in shas[-reuses:]]
    log_file.close()
    tenth = max(images // 10, 1)
    return {
        "images": images, "files_per_image": files, "build_s": build_s,
        "build_own_first_tenth_median_ms": median_ms(builds[:tenth]),
        "build_own_last_tenth_median_ms": median_ms(builds[-tenth:]), "cap_pass_ms": round(1000 * cap_pass_s, 1),
        "reuse_prepare_ms": median_ms([p for p, _ in reused]), "reuse_copy_ms": median_ms([c for _, c in reused]),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--build-s", type=float, default=0.0, help="the build's sleep before it writes its output")
    parser.add_argument("--reuses", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="bench-image-step-") as work:
        os.environ["BISECT_CACHE_DIR"] = str(Path(work) / "cache")
        result = measure(Path(work), args.files, args.images, args.build_s, min(args.reuses, args.images))
    result.update(machine=machine, load_average_at_end=load_average())
    print(result)
    if args.out:
        write_results(args.out, result)


if __name__ == "__main__":
    main()
