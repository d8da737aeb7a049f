"""Core benchmark: the local executor (W = 1, 4, 8 workers) against `git bisect run` on the same repositories.

    python benchmarks/bench_core.py [--commits 1000] [--sleep 0.2] [--workers 1,4,8] [--culprits 3]
                                    [--stores fresh,existing] [--out FILE]

For each of --culprits seeded culprit positions one synthetic history is generated (synthetic,
`commits + 1` commits on a linear main branch: index 0 good, indexes >= culprit bad, `test.sh` sleeping
--sleep seconds). Every configuration bisects that same repository over the same range (good = the root
commit, bad = the tip), so n = --commits suspects, and must name the known culprit or the benchmark fails.

gpu-bisect runs as a real subprocess, `python -m bisector start ... --format json --db sqlite:///FILE`, with a
fresh BISECT_DATA_DIR and BISECT_CACHE_DIR per run (so every run pays the worktree creation). --stores says on
which store: `fresh`, a new SQLite file per run (the run creates the schema); `existing`, one SQLite file for the
whole benchmark, made with its schema and one bisect before the timed runs and holding every earlier run's
bisect (a user's normal case: one store per user or team, created once). Each store kind is its own
configuration. git runs `git bisect start BAD GOOD && git bisect run bash test.sh` in the repository.

Definitions (also written into the JSON output under "definitions"):

* steps: test runs started (store rows for gpu-bisect, cancelled speculative probes included;
  `git bisect good|bad|skip` lines of `git bisect log` for git).
* rounds: the longest chain of non-cancelled steps s1 -> s2 -> ... in which each step started after
  the previous one finished (the coordinator's `started`/`finished` timestamps from the store). It is the
  number of test durations that sit back to back on the critical path: W=1 gives the step count, a
  synchronous K-ary search gives its number of waves. git bisect is sequential: rounds = steps.
* test time: build_s + run_s the workers measured around the test's process (for git: steps x the median
  time of `bash test.sh` run directly, measured beforehand, fork/exec from Python included).
* critical test time: the largest sum of test time along such a chain (cancelled steps included: their
  partial run occupied the slot). For W=1 it is the sum of all test time.
* bisect wall: the store's created -> finished (what the report calls wall_s): range and candidates
  stored, workers spawned, every step, up to the verdict. The target's overhead is
  bisect wall - critical test time, per critical-path step in ms and as % of bisect wall.
* end-to-end wall: the subprocess from spawn to exit (and its stdout and stderr closed); startup = spawn ->
  created (interpreter, imports, store schema, range listing), teardown = finished -> exit (cancelling
  stragglers, stopping workers, rendering the report, the interpreter's exit).
* per-step split (gpu-bisect): dispatch = (finished - started) - test time of every step but a worker's
  first; pre = started -> the `# started` line the worker writes into the step log after its checkout;
  gap = idle time of a worker between two of its steps; worker start = the largest pre of a worker's first
  step (process spawn, imports, `git worktree add`).

Targets (#14, side by side with `git bisect run` in the same run; run it with --sleep 1): W=1 needs no more
steps than git (worst run against git's fewest) and no more end-to-end wall (median against median); W=8 is at
least 2.5x faster end to end than git (medians, process start included) with a start-up under 0.3 s; the
coordinator's cost per step at W=8 (overhead_s / steps) is under 10 ms. #38's, for long ranges (--commits
100000 --sleep 0): W=1 at most twice git's end-to-end wall, its peak RSS under 100 MB. Also reported: rounds <=
ceil(log_{W+1} n) + 2, and each run's CPU seconds (the measure that holds on a loaded machine). Each
configuration runs --repeat times per culprit, in an order rotated between repositories and repeats, after one
untimed warm-up bisect. A missed target is a result, not an error: the exit code is 1 only when a run fails or
names a wrong commit.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from operator import itemgetter
from pathlib import Path
from typing import Any

from common import (
    RESULTS,
    ROOT,
    BenchmarkError,
    add_history_options,
    capture,
    ceil_log,
    command_line,
    culprit_positions,
    load_average,
    longest_chain,
    machine_info,
    project_pythonpath,
    run_main,
    run_measured,
    worker_counts,
    write_results,
)

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_core.py` without PYTHONPATH

RUN_CMD = "bash test.sh"
METRIC_REGEX = r"metric: ([0-9.]+)"
METRIC_EXPECT = ">= 8.0"
SPEEDUP_TARGET_W8 = 2.5
E2E_VS_GIT_LIMIT_W1 = 2.0  # #38
PEAK_RSS_TARGET_MB = 100.0  # #38
STARTUP_TARGET_S = 0.3
COST_PER_STEP_TARGET_MS = 10.0
SUBPROCESS_TIMEOUT_S = 900.0
BASELINE_RUNS = 7
FRESH, EXISTING = "fresh", "existing"
QUICK_RUNS = """\
#14's cases (1 s tests, n = 1000, W=1 and W=8 side by side with git bisect run), on both kinds of store:
  python benchmarks/bench_core.py --sleep 1 --workers 1,8 --culprits 3 --repeat 1    # about 3 minutes
Quick look, one culprit, the user's usual existing store only:
  python benchmarks/bench_core.py --sleep 1 --workers 1,8 --culprits 1 --repeat 1 --stores existing  # ~40 s
Compile the bytecode first where the checkout runs with PYTHONDONTWRITEBYTECODE=1, as an installed copy has it:
  python -m compileall -q bisector db workers vocab kernels
"""

DEFINITIONS = {
    "n": "suspects: commits after the good endpoint up to the bad one (--commits)",
    "steps": "test runs started, cancelled speculative probes included (git: good/bad/skip lines of git bisect log)",
    "rounds": "longest chain of non-cancelled steps each starting after the previous one finished (git: steps)",
    "test_s": "sum of build_s + run_s of every step (git: steps x median direct `bash test.sh` time)",
    "critical_test_s": "largest sum of test time along a chain of steps each starting after the previous finished",
    "bisect_wall_s": "store created -> finished (report wall_s); git: `git bisect start` + `git bisect run`",
    "overhead_s": "bisect_wall_s - critical_test_s",
    "overhead_ms_per_round": "overhead_s / rounds (per step on the critical path; per step for W=1 and git)",
    "overhead_pct": "overhead_s / bisect_wall_s",
    "cost_ms_per_step": "overhead_s / steps: what the coordinator and workers add per step (target < 10 ms at W=8)",
    "e2e_wall_s": "subprocess spawn -> exit (its stdout and stderr closed)",
    "startup_s": "spawn -> store created (interpreter, imports, store schema, range listing)",
    "store": "fresh: a new SQLite file per run; existing: one file made before the timed runs, shared by them",
    "first_step_delay_s": "store created -> first step started (candidates stored, worker processes spawned)",
    "teardown_s": "store finished -> process exit (stragglers cancelled, workers stopped, report rendered)",
    "dispatch_ms": "per step but each worker's first: (finished - started) - test time (checkout, IPC, store writes)",
    "pre_ms": "part of dispatch before the test: started -> the worker's `# started` log line (after the checkout)",
    "post_ms": "part of dispatch after the test: finished - log `# started` - test time (result back, recorded)",
    "worker_first_pre_ms_max": "largest pre_ms of a worker's first step: process spawn + imports + worktree add",
    "slot_gap_ms": "per worker: next step's started - previous step's finished (coordinator think time + idle)",
    "utilization": "test_s / (W x (finished - first step started))",
    "cpu_s": "user + system CPU seconds of the run's process tree (wait4): git bisect's two commands, gpu-bisect's "
    "process with its workers and git; on a shared machine the measure to compare changes by",
    "peak_rss_mb": "the largest resident set of any one process of the run (wait4's ru_maxrss); never below the "
    "benchmark's own when it spawned the run (~45 MB), which Linux counts in a child's",
}


# --- environment ---------------------------------------------------------------------------------------------


# --- repositories --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Repo:
    path: Path
    good: str
    bad: str
    culprit_index: int
    culprit_sha: str


def build_repo(path: Path, commits: int, culprit: int, sleep_s: float) -> Repo:
    """Written by a child process: the benchmark stays small, so that each run's peak RSS is the run's own (Linux
    counts, in a child's ru_maxrss, the pages of the parent it was forked from)."""
    program = (
        "import json, sys\nfrom synthetic import culprit_history\n"
        "h = culprit_history(__import__('pathlib').Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), "
        "sleep_s=float(sys.argv[4]))\nprint(json.dumps([h.first_bad, h.shas]))"
    )
    argv = [sys.executable, "-c", program, str(path), str(commits), str(culprit), str(sleep_s)]
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "benchmarks"), env.get("PYTHONPATH", "")])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    first_bad, shas = json.loads(done.stdout) if done.returncode == 0 else (None, [])
    if first_bad != culprit or len(shas) != commits + 1:
        raise BenchmarkError(f"synthetic history at {path} is not what was asked for: {done.stderr[-2000:]}")
    return Repo(path, shas[0], shas[-1], culprit, shas[culprit])


def child_env(data_dir: Path | None = None, cache_dir: Path | None = None) -> dict[str, str]:
    """The environment of every bisect: the baked-in sleep, CPU slots, a fresh data and cache dir."""
    env = dict(os.environ)
    for name in ("SYNTHETIC_SLEEP_S", "BISECT_DB", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        env.pop(name, None)
    env["BISECT_GPUS"] = ""  # CPU slots: W=8 must not depend on how many GPUs this host has
    env["PYTHONPATH"] = project_pythonpath()
    if data_dir is not None:
        env["BISECT_DATA_DIR"] = str(data_dir)
    if cache_dir is not None:
        env["BISECT_CACHE_DIR"] = str(cache_dir)
    return env


def baseline_test_s(repo: Repo, runs: int = BASELINE_RUNS) -> float:
    """Median wall time of `bash test.sh` run directly in the repository (fork/exec included)."""
    env = child_env()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(shlex.split(RUN_CMD), cwd=repo.path, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# --- measurements --------------------------------------------------------------------------------------------


@dataclass
class Run:
    tool: str  # "gpu-bisect" or "git bisect"
    workers: int
    store: str  # "fresh" or "existing" (gpu-bisect), "-" (git)
    culprit_index: int
    n: int
    found: str
    correct: bool
    steps: int
    decided: int
    cancelled: int
    endpoint_checks: int
    rounds: int
    test_s: float
    critical_test_s: float
    bisect_wall_s: float
    overhead_s: float
    overhead_ms_per_round: float
    overhead_pct: float
    e2e_wall_s: float
    e2e_overhead_pct: float
    cpu_s: float
    peak_rss_mb: float
    startup_s: float | None = None
    first_step_delay_s: float | None = None
    loop_s: float | None = None
    teardown_s: float | None = None
    rounds_by_time: float | None = None
    dispatch_ms_median: float | None = None
    pre_ms_median: float | None = None
    post_ms_median: float | None = None
    worker_first_pre_ms_max: float | None = None
    slot_gap_ms_median: float | None = None
    utilization: float | None = None
    step_log: list[dict[str, Any]] = field(default_factory=list)


def _chain(steps: list[dict[str, Any]], weight: str | None) -> float:
    """The heaviest chain of steps in which each starts after the previous one finished: weight None counts
    steps; otherwise sums steps[i][weight]."""
    weigh = (lambda s: 1.0) if weight is None else itemgetter(weight)
    return longest_chain(steps, itemgetter("started"), itemgetter("finished"), weigh)


def _stored_steps(db_url: str, bisect_id: int, last: int) -> list[dict[str, Any]]:
    from bisector.db.store import Store

    with Store.open(db_url) as store:
        positions = store.candidates(bisect_id).position
        rows = store.steps(bisect_id)
    steps = []
    for s in rows:
        if s.finished is None or s.verdict is None:
            raise BenchmarkError(f"step {s.id} of bisect {bisect_id} never finished")
        steps.append(
            {
                "id": s.id,
                "position": positions[s.sha],
                "verdict": s.verdict.value,
                "worker": s.worker,
                "started": s.started.timestamp(),
                "finished": s.finished.timestamp(),
                "test_s": (s.build_s or 0.0) + (s.run_s or 0.0),
                "endpoint": positions[s.sha] in (0, last),
                "worker_started": _log_started(s.log_path),
            }
        )
    return steps


def _log_started(log_path: str) -> float | None:
    """When the worker began the step's commands: the `# started` line StepRunner writes after the checkout."""
    try:
        with open(log_path, errors="replace") as log:
            for line in log:
                if line.startswith("# started "):
                    return datetime.fromisoformat(line.removeprefix("# started ").strip()).timestamp()
                if not line.startswith("#"):
                    break
    except (OSError, ValueError):
        pass
    return None


def _median_ms(values: list[float]) -> float | None:
    return _ms(statistics.median(values)) if values else None


def _ms(value: float) -> float:
    return round(value * 1000, 1)


def _times(test_s: float, critical_s: float, wall_s: float, e2e_s: float, rounds: int) -> dict[str, Any]:
    """A run's times and overheads (DEFINITIONS), rounded as stored, from its test time, critical test time, bisect
    wall, end-to-end wall and rounds."""
    overhead = wall_s - critical_s
    return {
        "test_s": round(test_s, 3),
        "critical_test_s": round(critical_s, 3),
        "bisect_wall_s": round(wall_s, 3),
        "overhead_s": round(overhead, 3),
        "overhead_ms_per_round": _ms(overhead / rounds),
        "overhead_pct": round(100 * overhead / wall_s, 1),
        "e2e_wall_s": round(e2e_s, 3),
        "e2e_overhead_pct": round(100 * (e2e_s - critical_s) / e2e_s, 1),
    }


def existing_store_url(work: Path) -> str:
    """The store every `--stores existing` run of this benchmark shares."""
    return f"sqlite:///{work / 'existing-store.db'}"


def run_gpu_bisect(repo: Repo, n: int, workers: int, work: Path, *, metric: bool, store: str = FRESH) -> Run:
    """store: FRESH (a new SQLite file) or EXISTING (work's shared store, see existing_store_url)."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"w{workers}-", dir=work))
    db_url = f"sqlite:///{run_dir / 'bisect.db'}" if store == FRESH else existing_store_url(work)
    env = child_env(run_dir / "data", run_dir / "cache")
    cmd = [
        sys.executable, "-m", "bisector", "start", "--repo", str(repo.path), "--good", repo.good, "--bad", repo.bad,
        "--run", RUN_CMD, "--workers", str(workers), "--format", "json", "--db", db_url,
        "--no-explain",  # the search alone: explaining a culprit is a separate, optional cost
    ]  # fmt: skip
    if metric:
        cmd += ["--metric", METRIC_REGEX, "--expect", METRIC_EXPECT]
    spawned = time.time()
    started = time.perf_counter()
    done, usage = run_measured(cmd, cwd=run_dir, env=env, timeout_s=SUBPROCESS_TIMEOUT_S)
    e2e = time.perf_counter() - started
    exited = spawned + e2e
    if done.returncode != 0:
        raise BenchmarkError(
            f"gpu-bisect W={workers} culprit {repo.culprit_index}: exit {done.returncode}\n{done.stderr[-3000:]}"
        )
    report = json.loads(done.stdout)
    found = (report.get("first_bad") or {}).get("sha", "")
    if report["status"] != "found" or found != repo.culprit_sha:
        raise BenchmarkError(
            f"gpu-bisect W={workers} named {found or report['status']!r}, "
            f"expected {repo.culprit_sha} (index {repo.culprit_index}): {report['message']}"
        )
    if report["candidates"] != n + 1:
        raise BenchmarkError(f"gpu-bisect saw {report['candidates']} candidates, expected {n + 1}")
    steps = _stored_steps(db_url, report["id"], n)
    created = datetime.fromisoformat(report["created"]).timestamp()
    finished = datetime.fromisoformat(report["finished"]).timestamp()
    live = [s for s in steps if s["verdict"] != "cancelled"]
    rounds = int(_chain(live, None))
    critical = _chain(steps, "test_s")
    test_s = sum(s["test_s"] for s in steps)
    wall = finished - created
    first_start = min(s["started"] for s in steps)
    loop = finished - first_start
    decided_runs = [s["test_s"] for s in steps if s["verdict"] in ("good", "bad")]
    ordered = sorted(steps, key=lambda s: s["started"])
    gaps: list[float] = []
    first_on_worker: list[dict[str, Any]] = []
    for worker in {s["worker"] for s in steps}:
        own = [s for s in ordered if s["worker"] == worker]
        first_on_worker.append(own[0])
        gaps += [b["started"] - a["finished"] for a, b in itertools.pairwise(own)]
    later = [s for s in ordered if all(s is not f for f in first_on_worker)]
    timed = [s for s in later if s["worker_started"] is not None]
    worker_start = [s["worker_started"] - s["started"] for s in first_on_worker if s["worker_started"] is not None]
    shutil.rmtree(run_dir / "cache", ignore_errors=True)  # the worktrees; the store and logs stay for a look
    return Run(
        tool="gpu-bisect",
        workers=workers,
        store=store,
        culprit_index=repo.culprit_index,
        n=n,
        found=found,
        correct=True,
        steps=len(steps),
        decided=sum(1 for s in steps if s["verdict"] in ("good", "bad", "skip")),
        cancelled=len(steps) - len(live),
        endpoint_checks=sum(1 for s in steps if s["endpoint"]),
        rounds=rounds,
        **_times(test_s, critical, wall, e2e, rounds),
        cpu_s=usage.cpu_s,
        peak_rss_mb=usage.peak_rss_mb,
        startup_s=round(created - spawned, 3),
        first_step_delay_s=round(first_start - created, 3),
        loop_s=round(loop, 3),
        teardown_s=round(exited - finished, 3),
        rounds_by_time=round(loop / statistics.median(decided_runs), 2) if decided_runs else None,
        dispatch_ms_median=_median_ms([s["finished"] - s["started"] - s["test_s"] for s in later]),
        pre_ms_median=_median_ms([s["worker_started"] - s["started"] for s in timed]),
        post_ms_median=_median_ms([s["finished"] - s["worker_started"] - s["test_s"] for s in timed]),
        worker_first_pre_ms_max=_ms(max(worker_start)) if worker_start else None,
        slot_gap_ms_median=_median_ms(gaps),
        utilization=round(test_s / (workers * loop), 3),
        step_log=[
            {
                "id": s["id"], "position": s["position"], "verdict": s["verdict"], "worker": s["worker"],
                "start_ms": _ms(s["started"] - created), "end_ms": _ms(s["finished"] - created),
                "test_ms": _ms(s["test_s"]),
                "worker_start_ms": _ms(s["worker_started"] - created) if s["worker_started"] is not None else None,
            }
            for s in ordered
        ],
    )  # fmt: skip


def run_git_bisect(repo: Repo, n: int, test_s: float) -> Run:
    env = child_env()
    git = ["git", "-C", str(repo.path)]
    subprocess.run([*git, "bisect", "reset"], env=env, capture_output=True, check=False)
    started = time.perf_counter()
    start, start_usage = run_measured([*git, "bisect", "start", repo.bad, repo.good], env=env, timeout_s=60)
    run, usage = run_measured([*git, "bisect", "run", *shlex.split(RUN_CMD)], env=env, timeout_s=SUBPROCESS_TIMEOUT_S)
    wall = time.perf_counter() - started
    log = capture(*git, "bisect", "log")
    subprocess.run([*git, "bisect", "reset"], env=env, capture_output=True, check=False)
    if start.returncode != 0 or run.returncode != 0:
        raise BenchmarkError(f"git bisect failed: {start.stderr}{run.stdout[-2000:]}{run.stderr[-2000:]}")
    match = re.search(r"^([0-9a-f]{40}) is the first bad commit", run.stdout, re.MULTILINE)
    found = match.group(1) if match else ""
    if found != repo.culprit_sha:
        raise BenchmarkError(f"git bisect named {found!r}, expected {repo.culprit_sha} (index {repo.culprit_index})")
    steps = len(re.findall(r"^git bisect (?:good|bad|skip) ", log, re.MULTILINE))
    announced = len(re.findall(r"^running ", run.stdout, re.MULTILINE))
    if steps != announced:
        raise BenchmarkError(f"git bisect log shows {steps} steps but `git bisect run` ran the test {announced} times")
    tests = steps * test_s
    return Run(
        tool="git bisect",
        workers=1,
        store="-",
        culprit_index=repo.culprit_index,
        n=n,
        found=found,
        correct=True,
        steps=steps,
        decided=steps,
        cancelled=0,
        endpoint_checks=0,
        rounds=steps,
        **_times(tests, tests, wall, wall, steps),  # sequential: every test is on the critical path
        cpu_s=round(start_usage.cpu_s + usage.cpu_s, 3),
        peak_rss_mb=max(start_usage.peak_rss_mb, usage.peak_rss_mb),
    )


# --- targets and summary -------------------------------------------------------------------------------------


def summarize(runs: list[Run], n: int) -> list[dict[str, Any]]:
    rows = []
    for tool, workers, store in dict.fromkeys((r.tool, r.workers, r.store) for r in runs):
        group = [r for r in runs if (r.tool, r.workers, r.store) == (tool, workers, store)]
        row: dict[str, Any] = {
            "config": _config_name(tool, workers, store),
            "tool": tool,
            "workers": workers,
            "store": store,
            "runs": len(group),
            "all_correct": all(r.correct for r in group),
            "steps_max": max(r.steps for r in group),
            "steps_min": min(r.steps for r in group),
            "steps_mean": round(statistics.mean(r.steps for r in group), 2),
            "cancelled_mean": round(statistics.mean(r.cancelled for r in group), 2),
            "rounds_max": max(r.rounds for r in group),
            "rounds_mean": round(statistics.mean(r.rounds for r in group), 2),
            "bisect_wall_s_median": round(statistics.median(r.bisect_wall_s for r in group), 3),
            "e2e_wall_s_median": round(statistics.median(r.e2e_wall_s for r in group), 3),
            "test_s_median": round(statistics.median(r.test_s for r in group), 3),
            "critical_test_s_median": round(statistics.median(r.critical_test_s for r in group), 3),
            "overhead_ms_per_round_median": round(statistics.median(r.overhead_ms_per_round for r in group), 1),
            "overhead_pct_median": round(statistics.median(r.overhead_pct for r in group), 1),
            "overhead_pct_max": max(r.overhead_pct for r in group),
            "e2e_overhead_pct_median": round(statistics.median(r.e2e_overhead_pct for r in group), 1),
            "cpu_s_median": round(statistics.median(r.cpu_s for r in group), 3),
            "peak_rss_mb_max": max(r.peak_rss_mb for r in group),
        }
        if tool == "gpu-bisect":
            row["startup_s_median"] = round(statistics.median(r.startup_s or 0.0 for r in group), 3)
            row["first_step_delay_s_median"] = round(statistics.median(r.first_step_delay_s or 0.0 for r in group), 3)
            row["teardown_s_median"] = round(statistics.median(r.teardown_s or 0.0 for r in group), 3)
            for key in ("dispatch_ms_median", "pre_ms_median", "post_ms_median", "slot_gap_ms_median"):
                values = [getattr(r, key) for r in group if getattr(r, key) is not None]
                row[key] = round(statistics.median(values), 1) if values else None
            values = [r.worker_first_pre_ms_max for r in group if r.worker_first_pre_ms_max is not None]
            row["worker_first_pre_ms_max_median"] = round(statistics.median(values), 1) if values else None
            row["utilization_median"] = round(statistics.median(r.utilization or 0.0 for r in group), 3)
            row["cost_ms_per_step_median"] = round(statistics.median(1000 * r.overhead_s / r.steps for r in group), 1)
        rows.append(row)
    git_row = next((row for row in rows if row["tool"] == "git bisect"), None)
    for row in rows:
        if row["tool"] == "gpu-bisect":
            row["targets"] = _targets(row, git_row, n)
    return rows


def _targets(row: dict[str, Any], git_row: dict[str, Any] | None, n: int) -> dict[str, Any]:
    """#14's and #38's targets for one gpu-bisect configuration, judged against git bisect run's row of the same
    run."""
    rounds_limit = ceil_log(n, row["workers"] + 1) + 2
    targets: dict[str, Any] = {"rounds": {"limit": rounds_limit, "met": row["rounds_max"] <= rounds_limit}}
    if git_row is not None and row["workers"] == 1:
        targets["steps"] = {"limit": git_row["steps_min"], "met": row["steps_max"] <= git_row["steps_min"]}
        limit = git_row["e2e_wall_s_median"]
        targets["e2e_wall_s"] = {"limit": limit, "met": row["e2e_wall_s_median"] <= limit}
        twice = round(E2E_VS_GIT_LIMIT_W1 * limit, 3)
        targets["e2e_wall_s_2x_git"] = {"limit": twice, "met": row["e2e_wall_s_median"] <= twice}
    if row["workers"] == 1:
        targets["peak_rss_mb"] = {"limit": PEAK_RSS_TARGET_MB, "met": row["peak_rss_mb_max"] < PEAK_RSS_TARGET_MB}
    if row["workers"] == 8:
        if git_row is not None:
            speedup = git_row["e2e_wall_s_median"] / row["e2e_wall_s_median"]
            targets["speedup"] = {"limit": SPEEDUP_TARGET_W8, "value": round(speedup, 2),
                                  "met": speedup >= SPEEDUP_TARGET_W8}  # fmt: skip
        targets["startup_s"] = {"limit": STARTUP_TARGET_S, "met": row["startup_s_median"] < STARTUP_TARGET_S}
        cost = row["cost_ms_per_step_median"]
        targets["cost_ms_per_step"] = {"limit": COST_PER_STEP_TARGET_MS, "met": cost < COST_PER_STEP_TARGET_MS}
    return targets


def print_tables(runs: list[Run], summary: list[dict[str, Any]], n: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)

    def opt(value: float | None, fmt: str = "{:.3f}") -> str:
        return "-" if value is None else fmt.format(value)

    detail = Table(title="every run (times in s unless ms)", title_justify="left")
    columns = (
        "config", "culprit", "steps", "cancelled", "rounds", "wall", "crit test", "ovh ms/round", "ovh %", "e2e",
        "startup", "to 1st step", "teardown", "worker start ms", "dispatch ms", "pre ms", "gap ms", "util", "cpu",
        "peak MB",
    )  # fmt: skip
    for column in columns:
        detail.add_column(column, justify="left" if column == "config" else "right", no_wrap=True)
    for r in runs:
        detail.add_row(
            _config_name(r.tool, r.workers, r.store), str(r.culprit_index), str(r.steps), str(r.cancelled),
            str(r.rounds),
            f"{r.bisect_wall_s:.3f}", f"{r.critical_test_s:.3f}", f"{r.overhead_ms_per_round:.1f}",
            f"{r.overhead_pct:.1f}", f"{r.e2e_wall_s:.3f}", opt(r.startup_s), opt(r.first_step_delay_s),
            opt(r.teardown_s), opt(r.worker_first_pre_ms_max, "{:.0f}"), opt(r.dispatch_ms_median, "{:.1f}"),
            opt(r.pre_ms_median, "{:.1f}"), opt(r.slot_gap_ms_median, "{:.1f}"), opt(r.utilization, "{:.2f}"),
            f"{r.cpu_s:.2f}", f"{r.peak_rss_mb:.0f}",
        )  # fmt: skip
    console.print(detail)

    table = Table(title=f"summary (n = {n})", title_justify="left")
    for column in (
        "config", "steps max (mean)", "rounds max (mean)", "wall s (med)", "e2e s (med)", "cpu s (med)",
        "peak MB (max)", "ovh ms/step (med)", "ovh % med (max)", "targets",
    ):  # fmt: skip
        table.add_column(column, justify="left" if column == "config" else "right", no_wrap=True)

    def verdicts(targets: dict[str, Any]) -> str:
        return " ".join(
            f"{name} {'[green]met' if t['met'] else '[red]MISSED'}[/] ({t.get('value', '')}/{t['limit']})"
            for name, t in targets.items()
        )

    for row in summary:
        table.add_row(
            row["config"], f"{row['steps_max']} ({row['steps_mean']:g})",
            f"{row['rounds_max']} ({row['rounds_mean']:g})",
            f"{row['bisect_wall_s_median']:.3f}", f"{row['e2e_wall_s_median']:.3f}", f"{row['cpu_s_median']:.2f}",
            f"{row['peak_rss_mb_max']:.0f}", f"{row.get('cost_ms_per_step_median', 0.0):.1f}",
            f"{row['overhead_pct_median']:.1f} ({row['overhead_pct_max']:.1f})", verdicts(row.get("targets") or {}),
        )  # fmt: skip
    console.print(table)


def _config_name(tool: str, workers: int, store: str) -> str:
    if tool != "gpu-bisect":
        return "git bisect run"
    return f"W={workers}" if store == FRESH else f"W={workers}, {store} store"


# --- main ----------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog=QUICK_RUNS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_history_options(parser, commits=1000, sleep_s=0.2, workers="1,4,8")
    parser.add_argument("--repeat", type=int, default=2, help="runs of every configuration per culprit")
    parser.add_argument(
        "--stores", default=f"{FRESH},{EXISTING}",
        help="comma-separated: fresh (a new SQLite store per run) and/or existing (one store made before the timed "
        "runs, shared by them; its making is the warm-up, --no-warmup or not)",
    )  # fmt: skip
    parser.add_argument("--metric", action="store_true", help="judge by --metric/--expect instead of the exit code")
    parser.add_argument("--no-git", action="store_true", help="skip the `git bisect run` baseline")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up bisect")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (repos, stores, logs)")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_core.json")
    args = parser.parse_args(argv)
    args.worker_counts = worker_counts(parser, args.workers)
    args.store_kinds = list(dict.fromkeys(kind.strip() for kind in args.stores.split(",") if kind.strip()))
    if not args.store_kinds or not set(args.store_kinds) <= {FRESH, EXISTING}:
        parser.error(f"--stores {args.stores!r}: expected {FRESH}, {EXISTING} or both, comma-separated")
    if args.commits < 2 or args.culprits < 1 or args.repeat < 1 or args.sleep < 0:
        parser.error("--commits >= 2, --culprits >= 1, --repeat >= 1 and --sleep >= 0 are required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.commits
    machine = machine_info()  # before the runs: the commit and load that the numbers belong to
    work = Path(tempfile.mkdtemp(prefix="bench-core-"))
    started = time.perf_counter()
    runs: list[Run] = []
    try:
        positions = culprit_positions(n, args.culprits, args.seed)
        repos = [build_repo(work / f"repo-{c}", n, c, args.sleep) for c in positions]
        baselines = {r.culprit_index: baseline_test_s(r) for r in repos}
        print(f"work dir {work}; culprits {positions}; direct `bash test.sh`: "
              + ", ".join(f"{b * 1000:.1f} ms" for b in baselines.values()), file=sys.stderr)  # fmt: skip
        # Untimed: imports compiled, page cache warm, so the first timed run is not special. With --stores existing
        # this bisect also makes the shared store (its schema and one bisect) before the timed runs.
        if EXISTING in args.store_kinds:
            run_gpu_bisect(repos[0], n, 1, work, metric=args.metric, store=EXISTING)
        elif not args.no_warmup:
            run_gpu_bisect(repos[0], n, 1, work, metric=args.metric)
        configs = [("gpu-bisect", w, kind) for w in args.worker_counts for kind in args.store_kinds]
        if not args.no_git:
            configs.append(("git bisect", 1, "-"))
        for round_index in range(args.repeat):
            for i, repo in enumerate(repos):
                shift = (i + round_index) % len(configs)  # rotate the order so no config always runs first
                for tool, workers, kind in configs[shift:] + configs[:shift]:
                    if tool == "gpu-bisect":
                        result = run_gpu_bisect(repo, n, workers, work, metric=args.metric, store=kind)
                    else:
                        result = run_git_bisect(repo, n, baselines[repo.culprit_index])
                    runs.append(result)
                    name = _config_name(tool, workers, kind)
                    print(
                        f"  culprit {repo.culprit_index:>5} {name:<22}: {result.steps} steps, "
                        f"{result.rounds} rounds, {result.bisect_wall_s:.2f}s, overhead {result.overhead_pct:.1f}%",
                        file=sys.stderr,
                    )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    order = {config: i for i, config in enumerate(sorted(configs, key=lambda c: (c[0] != "gpu-bisect", c[1])))}
    runs.sort(key=lambda r: (order[(r.tool, r.workers, r.store)], r.culprit_index))
    summary = summarize(runs, n)
    print_tables(runs, summary, n)
    output = {
        "benchmark": "core: local executor vs git bisect run",
        "command": command_line("bench_core.py", argv),
        "parameters": {
            "commits": n,
            "sleep_s": args.sleep,
            "workers": args.worker_counts,
            "culprits": positions,
            "seed": args.seed,
            "repeat": args.repeat,
            "stores": args.store_kinds,
            "judge": "metric" if args.metric else "exit code",
            "direct_test_s": {str(k): round(v, 4) for k, v in baselines.items()},
        },
        "machine": machine | {"load_average_at_end": load_average()},
        "definitions": DEFINITIONS,
        "targets": {
            "steps_w1": "<= git bisect run's steps (worst W=1 run against git's fewest)",
            "e2e_wall_s_w1": "<= git bisect run's end-to-end wall (medians)",
            "e2e_wall_s_2x_git_w1": f"<= {E2E_VS_GIT_LIMIT_W1:g}x git bisect run's end-to-end wall (medians; #38)",
            "peak_rss_mb_w1": f"< {PEAK_RSS_TARGET_MB:g} MB, the largest run's (#38)",
            "speedup_w8": f">= {SPEEDUP_TARGET_W8}x git bisect run's end-to-end wall (medians)",
            "startup_s_w8": f"< {STARTUP_TARGET_S} s",
            "cost_ms_per_step_w8": f"< {COST_PER_STEP_TARGET_MS} ms",
            "rounds": {str(w): f"<= ceil(log_{w + 1} n) + 2 = {ceil_log(n, w + 1) + 2}" for w in args.worker_counts},
        },
        "summary": summary,
        "runs": [asdict(r) for r in runs],
        "benchmark_wall_s": round(time.perf_counter() - started, 1),
    }
    write_results(args.out, output)
    print(f"results: {args.out} ({output['benchmark_wall_s']:.0f}s)", file=sys.stderr)
    missed = [
        f"{row['config']} {name}"
        for row in summary
        for name, target in (row.get("targets") or {}).items()
        if target is not None and not target["met"]
    ]
    if missed:
        print("targets missed: " + ", ".join(missed), file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main, "bench_core")
