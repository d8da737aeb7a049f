"""What the benchmarks share: the machine they ran on, exact ceil(log_b n), culprit positions, the critical
path of a bisect's steps, and how a benchmark writes its results and ends."""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"  # git-ignored: where a benchmark writes its JSON unless --out names a file


class BenchmarkError(RuntimeError):
    """A run failed or named a wrong commit: the benchmark says so on one line and exits 1 (run_main)."""


def project_pythonpath() -> str:
    """This checkout first, then what the caller had (the GPU machine's bundle lives on PYTHONPATH)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def capture(*cmd: str, cwd: Path | None = None, strip: bool = True) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if strip else done.stdout


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and of the children it waited for (git)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class Usage:
    """What one process and the descendants it waited for used (wait4): the machine is shared, so CPU seconds
    judge a change where wall seconds vary with the load."""

    cpu_s: float  # user + system
    peak_rss_mb: float  # the largest resident set of any one of them


def run_measured(
    cmd: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout_s: float
) -> tuple[subprocess.CompletedProcess[str], Usage]:
    """subprocess.run(cmd, capture_output=True, text=True) with the command's Usage."""
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        output: dict[str, str] = {}
        readers = [
            threading.Thread(target=lambda name, pipe: output.__setitem__(name, pipe.read()), args=(name, pipe))
            for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr))
        ]
        timed_out = threading.Event()
        killer = threading.Timer(timeout_s, lambda: (timed_out.set(), proc.kill()))
        for thread in (*readers, killer):
            thread.start()
        _, status, usage = os.wait4(proc.pid, 0)
        killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        for thread in readers:
            thread.join()
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(cmd, timeout_s)
    done = subprocess.CompletedProcess(cmd, proc.returncode, output["stdout"], output["stderr"])
    return done, Usage(round(usage.ru_utime + usage.ru_stime, 3), round(usage.ru_maxrss / 1024, 1))


def mirror_clone(mirrors: Path, repo: str, scratch: Path) -> Path:
    """A bare clone of MIRRORS/<owner>+<name>/repo in scratch, sharing the mirror's objects (GitPython needs a
    repository it can tell is bare); made once per scratch folder."""
    target = scratch / repo.replace("/", "+")
    if not target.exists():
        source = mirrors / repo.replace("/", "+") / "repo"
        subprocess.run(["git", "clone", "-q", "--bare", "--shared", str(source), str(target)], check=True)
    return target


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    os_name = platform.platform()
    try:
        release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        os_name = f"{release.get('PRETTY_NAME', '').strip(chr(34))} (kernel {platform.release()})"
    except OSError:
        pass
    dirty = capture("git", "status", "--porcelain", "--untracked-files=no", cwd=ROOT, strip=False)
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": mem_gib,
        "os": os_name,
        "python": platform.python_version(),
        "git": capture("git", "--version"),
        "commit": capture("git", "rev-parse", "--short", "HEAD", cwd=ROOT),
        "modified_files": [line[3:] for line in dirty.splitlines() if line.strip()],
        "load_average_at_start": load_average(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def ceil_log(n: int, base: int) -> int:
    """The smallest k with base**k >= n (exact, no floating point)."""
    k, power = 0, 1
    while power < n:
        power *= base
        k += 1
    return k


def add_history_options(parser: argparse.ArgumentParser, *, commits: int, sleep_s: float, workers: str) -> None:
    """The options of a benchmark that bisects seeded synthetic histories at several worker counts (the defaults
    given): --commits, --sleep, --workers, --culprits, --seed. worker_counts reads --workers."""
    parser.add_argument("--commits", type=int, default=commits, help="suspects n: commits after the good endpoint")
    parser.add_argument("--sleep", type=float, default=sleep_s, help="seconds each test sleeps")
    parser.add_argument("--workers", default=workers, help="comma-separated worker counts W")
    parser.add_argument("--culprits", type=int, default=3, help="seeded culprit positions, one repository each")
    parser.add_argument("--seed", type=int, default=20261129)


def worker_counts(parser: argparse.ArgumentParser, text: str) -> list[int]:
    """--workers' counts; a usage error (exit 2) unless they are integers, at least one, each >= 1."""
    try:
        counts = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        parser.error(f"--workers {text!r}: expected comma-separated integers")
    if not counts or min(counts) < 1:
        parser.error("--workers: every count must be at least 1")
    return counts


def culprit_positions(commits: int, count: int, seed: int) -> list[int]:
    """count distinct culprit indexes in 1..commits, seeded, sorted."""
    if count > commits:
        raise BenchmarkError(f"--culprits {count} exceeds --commits {commits}")
    return sorted(random.Random(seed).sample(range(1, commits + 1), count))


def longest_chain(
    steps: Sequence[T], began: Callable[[T], float], ended: Callable[[T], float], weigh: Callable[[T], float]
) -> float:
    """The heaviest chain of steps in which each began after the previous one ended (weigh: 1 counts steps)."""
    ordered = sorted(steps, key=began)
    best: list[float] = []
    for i, step in enumerate(ordered):
        before = [best[j] for j in range(i) if ended(ordered[j]) <= began(step)]
        best.append(weigh(step) + max(before, default=0.0))
    return max(best, default=0.0)


def command_line(script: str, argv: list[str] | None) -> str:
    """How the benchmark was started, for its results: `python benchmarks/<script> ARGS`."""
    return " ".join(["python", f"benchmarks/{script}", *(argv if argv is not None else sys.argv[1:])])


def write_results(out: Path, results: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


def run_main(main: Callable[[], int], name: str) -> None:
    """Exit with main's code; a BenchmarkError is one line on stderr (`name: why`) and exit 1."""
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        sys.exit(1)
