"""Ray executor benchmark: rounds and per-step scheduling overhead of RayExecutor against LocalExecutor.

    python benchmarks/bench_ray.py [--commits 4000] [--sleep 0.5] [--workers 1,2,4,8,16] [--culprits 3]
                                   [--executors local,ray] [--out FILE]

For each of --culprits seeded culprit positions one synthetic history is generated (synthetic,
`commits + 1` commits: index 0 good, indexes >= culprit bad, `test.sh` sleeping --sleep seconds). Each executor
bisects each repository at every W with the Coordinator in this process (a fresh SQLite store per run, the spec's
explain=False so no re-runs follow the search) and must name the known culprit. One local Ray cluster serves
every Ray run, declaring max(W) CPU slots and no GPU (the tests only sleep); its start-up is reported once and is
not part of any run. Both executors share one cache dir, whose slot worktrees are created before timing, so
neither pays `git worktree add` inside a run.

The run command brackets the test with timestamps, `echo bench-t0 $(date +%s.%N); bash test.sh; ...
echo bench-t1 $(date +%s.%N)`, and an executor wrapper stamps submit() and the poll() that returned each result
(one host, one clock). Per step (each slot's first step is left out of the per-step numbers: it also waits
for its worker to boot, which `start` measures):

* dispatch: submit() called -> the test command starts (IPC or Ray task, checkout, log header, bash start);
  "to header" is its first part, up to the step log's `# started` line (IPC or Ray task, checkout)
* return: the test command ends -> poll() hands its result to the coordinator (judge, IPC or Ray, wake-up)
* overhead: dispatch + return, the time a step holds its slot outside its test command (steps that finished);
  the target is Ray overhead < 100 ms per step, judged on the mean over the runs of a configuration
* slot gap: on one worker, the next test's start - the previous test's end: overhead plus the coordinator's
  own time (store writes, strategy), plus idle time when the search had nothing to give that slot
* start: executor factory called -> every slot's first test command has started (actors placed / worker
  processes booted, first checkout)
* rounds: the longest chain of non-cancelled steps each submitted after the previous one's result arrived;
  target ceil(log_{W+1} n) + 2 (n = --commits suspects; the +2 covers the endpoint checks)
* wall: executor factory called -> last result (worker start included, Ray's cluster start not);
  overhead/round = (wall - critical-path test time) / rounds
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from operator import attrgetter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_ray.py` without PYTHONPATH

from common import (  # noqa: E402
    RESULTS,
    BenchmarkError,
    add_history_options,
    ceil_log,
    command_line,
    culprit_positions,
    load_average,
    longest_chain,
    run_main,
    worker_counts,
    write_results,
)
from common import machine_info as common_machine_info  # noqa: E402
from synthetic import culprit_history  # noqa: E402

from bisector.core.spec import BisectSpec  # noqa: E402
from bisector.db.store import Store  # noqa: E402
from bisector.runner.coordinator import Coordinator, prepare_bisect  # noqa: E402
from bisector.vocab.domain import BisectStatus, StepResult, Verdict  # noqa: E402
from bisector.vocab.gitrepo import GitRepo  # noqa: E402
from bisector.vocab.paths import worktree_root  # noqa: E402
from bisector.workers.executor import Assignment, Executor, StepRequest  # noqa: E402

RUN_CMD = 'echo "bench-t0 $(date +%s.%N)"; bash test.sh; rc=$?; echo "bench-t1 $(date +%s.%N)"; exit $rc'
OVERHEAD_TARGET_MS = 100.0


class TimedExecutor(Executor):
    """Delegates to an executor, stamping each submit() and the poll() that returned each result."""

    def __init__(self, inner: Executor, created: float) -> None:
        self.inner = inner
        self.created = created  # wall-clock time the factory was called
        self.submitted: dict[int, tuple[float, StepRequest, Assignment]] = {}
        self.arrived: dict[int, tuple[float, StepResult]] = {}
        self.closed_pids: list[int] = []
        self.close_s = float("nan")

    @property
    def slots(self) -> int:
        return self.inner.slots

    def worker_names(self) -> list[str]:
        return self.inner.worker_names()

    def free_workers(self) -> list[str]:
        return self.inner.free_workers()

    def submit(self, request: StepRequest) -> Assignment:
        stamp = time.time()
        assignment = self.inner.submit(request)
        self.submitted[request.step_id] = (stamp, request, assignment)
        return assignment

    def poll(self, timeout_s: float) -> list[StepResult]:
        results = self.inner.poll(timeout_s)
        stamp = time.time()
        for result in results:
            self.arrived[result.step_id] = (stamp, result)
        return results

    def cancel(self, step_id: int) -> None:
        self.inner.cancel(step_id)

    def close(self) -> None:
        pids = getattr(self.inner, "worker_pids", None)
        self.closed_pids = list(pids().values()) if pids else []
        started = time.perf_counter()
        self.inner.close()
        self.close_s = time.perf_counter() - started


@dataclass
class Run:
    executor: str
    workers: int
    culprit: int
    n: int
    steps: int
    cancelled: int
    rounds: int
    rounds_target: int
    construct_s: float
    start_s: float
    wall_s: float
    search_wall_s: float
    critical_test_s: float
    overhead_ms_per_round: float
    dispatch_ms_median: float
    dispatch_ms_mean: float
    to_header_ms_median: float
    return_ms_median: float
    return_ms_mean: float
    overhead_ms_median: float
    overhead_ms_mean: float
    overhead_ms_p90: float
    slot_gap_ms_median: float | None
    close_s: float


@dataclass
class _Step:
    submit: float  # submit() called
    arrive: float  # poll() returned its result
    header: float | None  # the step log's "# started" line: the worker has the step and its checkout done
    t0: float | None  # the test command started (None: cancelled before it printed)
    t1: float | None  # the test command ended (None: killed)
    worker: str
    verdict: Verdict

    @property
    def cancelled(self) -> bool:
        return self.verdict is Verdict.CANCELLED

    @property
    def test_s(self) -> float:
        if self.t0 is None:
            return 0.0
        return (self.t1 if self.t1 is not None else self.arrive) - self.t0


def _stamps(log_path: str) -> tuple[float | None, float | None, float | None]:
    header = t0 = t1 = None
    if not log_path or not Path(log_path).exists():  # cancelled before it started: nothing ran
        return header, t0, t1
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if line.startswith("# started "):
            header = datetime.fromisoformat(line.split()[2]).timestamp()
        elif line.startswith("bench-t0 "):
            t0 = float(line.split()[1])
        elif line.startswith("bench-t1 "):
            t1 = float(line.split()[1])
    return header, t0, t1


def _chain(steps: list[_Step], weigh: Callable[[_Step], float]) -> float:
    """The heaviest chain of steps each submitted after the previous one's result arrived."""
    return longest_chain(steps, attrgetter("submit"), attrgetter("arrive"), weigh)


def _ms(values: list[float], how: Callable[[list[float]], float]) -> float:
    return round(1000 * how(values), 1) if values else float("nan")


def _p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def measure(timed: TimedExecutor, label: str, workers: int, n: int) -> dict[str, Any]:
    steps = []
    for step_id, (submit, _, assignment) in timed.submitted.items():
        if step_id not in timed.arrived:
            raise BenchmarkError(f"{label}: step {step_id} never reported")
        arrive, result = timed.arrived[step_id]
        steps.append(_Step(submit, arrive, *_stamps(result.log_path), assignment.worker, result.verdict))
    if any(s.verdict is Verdict.ERROR for s in steps):
        raise BenchmarkError(f"{label}: infrastructure errors in an undisturbed run")
    live = [s for s in steps if not s.cancelled]
    first = {min((s for s in steps if s.worker == w), key=lambda s: s.submit).submit for w in {s.worker for s in steps}}
    warm = [s for s in steps if s.submit not in first]  # a slot's first step also waits for its worker to boot
    dispatch = [s.t0 - s.submit for s in warm if s.t0 is not None]
    checkout = [s.header - s.submit for s in warm if s.header is not None]
    back = [s.arrive - s.t1 for s in warm if s.t1 is not None and not s.cancelled]
    overhead = [s.t0 - s.submit + s.arrive - s.t1 for s in warm if s.t0 is not None and s.t1 is not None]
    first_t0 = [s.t0 for s in steps if s.submit in first and s.t0 is not None]
    gaps = []
    for worker in {s.worker for s in steps}:
        own = sorted((s for s in steps if s.worker == worker and s.t0 is not None), key=lambda s: s.submit)
        gaps += [b.t0 - (a.t1 if a.t1 is not None else a.arrive) for a, b in itertools.pairwise(own) if b.t0]
    rounds = int(_chain(live, lambda s: 1.0))
    search = max(s.arrive for s in steps) - min(s.submit for s in steps)
    wall = max(s.arrive for s in steps) - timed.created
    critical = _chain(steps, lambda s: s.test_s)
    return {
        "start_s": round(max(first_t0) - timed.created, 3),
        "steps": len(steps),
        "cancelled": len(steps) - len(live),
        "rounds": rounds,
        "rounds_target": ceil_log(n, workers + 1) + 2,
        "wall_s": round(wall, 3),
        "search_wall_s": round(search, 3),
        "critical_test_s": round(critical, 3),
        "overhead_ms_per_round": round(1000 * (wall - critical) / rounds, 1),
        "dispatch_ms_median": _ms(dispatch, statistics.median),
        "dispatch_ms_mean": _ms(dispatch, statistics.fmean),
        "to_header_ms_median": _ms(checkout, statistics.median),
        "return_ms_median": _ms(back, statistics.median),
        "return_ms_mean": _ms(back, statistics.fmean),
        "overhead_ms_median": _ms(overhead, statistics.median),
        "overhead_ms_mean": _ms(overhead, statistics.fmean),
        "overhead_ms_p90": _ms(overhead, _p90),
        "slot_gap_ms_median": _ms(gaps, statistics.median) if gaps else None,
    }


def make_executor(kind: str, repo: str, workers: int) -> Executor:
    if kind == "ray":
        from bisector.workers.ray_executor import RayExecutor

        return RayExecutor(repo, workers, None, {}, None)
    from bisector.workers.local import LocalExecutor

    return LocalExecutor(repo, workers, 0)


def _wait_gone(pids: list[int], limit_s: float = 10.0) -> None:
    """A killed actor releases its worktree lock when its process is gone; the next run wants the same slots."""
    deadline = time.monotonic() + limit_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)


def run_one(kind: str, history: Any, culprit: int, n: int, workers: int, work: Path) -> Run:
    run_dir = Path(tempfile.mkdtemp(prefix=f"{kind}-w{workers}-", dir=work))
    os.environ["BISECT_DATA_DIR"] = str(run_dir / "data")  # the coordinator's logs; the cache dir stays shared
    spec = BisectSpec.from_options({
        "repo": str(history.path), "good": history.shas[0], "bad": history.shas[-1], "run": RUN_CMD,
        "workers": workers, "timeout_s": 120.0, "executor": kind,
        "explain": False,  # the search alone: no re-runs to explain the culprit
    })  # fmt: skip
    timings: dict[str, float] = {}
    holder: list[TimedExecutor] = []

    def factory(_: BisectSpec) -> Executor:
        started, created = time.perf_counter(), time.time()
        timed = TimedExecutor(make_executor(kind, spec.repo, workers), created)
        timings["construct"] = time.perf_counter() - started
        holder.append(timed)
        return timed

    with Store.open(f"sqlite:///{run_dir / 'bisect.db'}") as store:
        record = Coordinator(store, factory).run(prepare_bisect(store, spec))
    if record.status is not BisectStatus.FOUND or record.first_bad != history.shas[culprit]:
        raise BenchmarkError(f"{kind} W={workers} culprit {culprit}: {record.status.value} {record.message}")
    _wait_gone(holder[0].closed_pids)
    numbers = measure(holder[0], f"{kind} W={workers} culprit {culprit}", workers, n)
    return Run(
        executor=kind, workers=workers, culprit=culprit, n=n, construct_s=round(timings["construct"], 3),
        close_s=round(holder[0].close_s, 3), **numbers,
    )  # fmt: skip


def prepare_worktrees(repo: Path, sha: str, slots: int) -> None:
    root = worktree_root(repo)
    git = GitRepo(str(repo))
    for index in range(slots):
        git.ensure_worktree(root / f"slot-{index}", sha)


def start_ray(slots: int) -> float:
    import ray

    started = time.perf_counter()
    ray.init(
        address="local", num_cpus=slots, num_gpus=0, include_dashboard=False, log_to_driver=False,
        logging_level=logging.ERROR,
    )  # fmt: skip
    return time.perf_counter() - started


def machine_info() -> dict[str, Any]:
    try:
        import ray

        ray_version: str | None = ray.__version__
    except ImportError:
        ray_version = None
    return {**common_machine_info(), "ray": ray_version}


def summarize(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for kind in dict.fromkeys(r.executor for r in runs):
        for workers in dict.fromkeys(r.workers for r in runs):
            group = [r for r in runs if r.executor == kind and r.workers == workers]
            if not group:
                continue
            rows.append(
                {
                    "executor": kind,
                    "workers": workers,
                    "runs": len(group),
                    "rounds_max": max(r.rounds for r in group),
                    "rounds_mean": round(statistics.fmean(r.rounds for r in group), 2),
                    "ceil_log": group[0].rounds_target - 2,
                    "rounds_target": group[0].rounds_target,
                    "rounds_met": all(r.rounds <= r.rounds_target for r in group),
                    "steps_mean": round(statistics.fmean(r.steps for r in group), 1),
                    "cancelled_mean": round(statistics.fmean(r.cancelled for r in group), 1),
                    "wall_s_median": round(statistics.median(r.wall_s for r in group), 2),
                    "search_wall_s_median": round(statistics.median(r.search_wall_s for r in group), 2),
                    "start_s_median": round(statistics.median(r.start_s for r in group), 2),
                    "dispatch_ms_median": round(statistics.median(r.dispatch_ms_median for r in group), 1),
                    "to_header_ms_median": round(statistics.median(r.to_header_ms_median for r in group), 1),
                    "return_ms_median": round(statistics.median(r.return_ms_median for r in group), 1),
                    "overhead_ms_mean": round(statistics.fmean(r.overhead_ms_mean for r in group), 1),
                    "overhead_ms_p90_max": max(r.overhead_ms_p90 for r in group),
                    "overhead_ms_per_round_median": round(statistics.median(r.overhead_ms_per_round for r in group), 1),
                    "slot_gap_ms_median": round(
                        statistics.median(r.slot_gap_ms_median for r in group if r.slot_gap_ms_median is not None), 1
                    )
                    if any(r.slot_gap_ms_median is not None for r in group)
                    else None,
                    "overhead_ms_mean_worst_run": max(r.overhead_ms_mean for r in group),
                    "overhead_met": statistics.fmean(r.overhead_ms_mean for r in group) < OVERHEAD_TARGET_MS,
                }
            )
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    columns = (
        "executor", "W", "rounds max (mean)", "ceil(log_{W+1} n)", "rounds target", "steps (cancelled)", "wall s",
        "start s", "dispatch ms (to header)", "return ms", "overhead ms/step mean (worst run; p90)",
        "overhead target", "gap ms", "overhead ms/round",
    )  # fmt: skip
    lines = [f"| {' | '.join(columns)} |", "| --- | " + " | ".join(["---:"] * (len(columns) - 1)) + " |"]
    for r in rows:
        gap = "-" if r["slot_gap_ms_median"] is None else f"{r['slot_gap_ms_median']:.1f}"
        cells = (
            r["executor"], r["workers"], f"{r['rounds_max']} ({r['rounds_mean']:g})", r["ceil_log"],
            f"≤ {r['rounds_target']} {'met' if r['rounds_met'] else 'MISSED'}",
            f"{r['steps_mean']:g} ({r['cancelled_mean']:g})", f"{r['wall_s_median']:.2f}",
            f"{r['start_s_median']:.2f}", f"{r['dispatch_ms_median']:.1f} ({r['to_header_ms_median']:.1f})",
            f"{r['return_ms_median']:.1f}",
            f"{r['overhead_ms_mean']:.1f} ({r['overhead_ms_mean_worst_run']:.1f}; {r['overhead_ms_p90_max']:.1f})",
            f"< {OVERHEAD_TARGET_MS:g} {'met' if r['overhead_met'] else 'MISSED'}", gap,
            f"{r['overhead_ms_per_round_median']:.1f}",
        )  # fmt: skip
        lines.append(f"| {' | '.join(map(str, cells))} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_history_options(parser, commits=4000, sleep_s=0.5, workers="1,2,4,8,16")
    parser.add_argument("--executors", default="local,ray", help="comma-separated: local, ray")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_ray.json")
    args = parser.parse_args(argv)
    args.worker_counts = worker_counts(parser, args.workers)
    args.kinds = [k.strip() for k in args.executors.split(",") if k.strip()]
    if not set(args.kinds) <= {"local", "ray"}:
        parser.error(f"--executors {args.executors!r}: expected local, ray or both, comma-separated")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.commits
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    os.environ["BISECT_CACHE_DIR"] = str(work / "cache")  # before Ray starts: its actors inherit it
    os.environ["BISECT_GPUS"] = ""  # CPU slots for both executors
    os.environ.pop("SYNTHETIC_SLEEP_S", None)
    started = time.perf_counter()
    machine_before = machine_info()
    runs: list[Run] = []
    ray_start_s = None
    try:
        positions = culprit_positions(n, args.culprits, args.seed)
        histories = {c: culprit_history(work / f"repo-{c}", n, c, sleep_s=args.sleep) for c in positions}
        for history in histories.values():
            prepare_worktrees(history.path, history.shas[0], max(args.worker_counts))
        if "ray" in args.kinds:
            ray_start_s = start_ray(max(args.worker_counts))
        for i, (culprit, history) in enumerate(histories.items()):
            kinds = args.kinds if i % 2 == 0 else args.kinds[::-1]  # alternate which executor goes first
            for workers in args.worker_counts:
                for kind in kinds:
                    run = run_one(kind, history, culprit, n, workers, work)
                    runs.append(run)
                    print(
                        f"culprit {culprit:>5} {kind:<5} W={workers:>2}: {run.steps} steps, {run.rounds} rounds "
                        f"(target {run.rounds_target}), wall {run.wall_s:.2f}s, overhead "
                        f"{run.overhead_ms_mean:.1f} ms/step (dispatch {run.dispatch_ms_median:.1f}, "
                        f"return {run.return_ms_median:.1f})",
                        file=sys.stderr,
                    )
    finally:
        if ray_start_s is not None:
            import ray

            ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    runs.sort(key=lambda r: (r.executor, r.workers, r.culprit))
    summary = summarize(runs)
    table = markdown_table(summary)
    print(table)
    result = {
        "benchmark": "ray executor vs local executor",
        "command": command_line("bench_ray.py", argv),
        "parameters": {"commits": n, "sleep_s": args.sleep, "workers": args.worker_counts, "culprits": positions},
        "machine": machine_before,
        "loadavg_after": load_average(),
        "ray_cluster_start_s": round(ray_start_s, 2) if ray_start_s is not None else None,
        "summary": summary,
        "runs": [asdict(r) for r in runs],
        "benchmark_wall_s": round(time.perf_counter() - started, 1),
    }
    write_results(args.out, result)
    print(f"results: {args.out} ({result['benchmark_wall_s']:.0f}s); ray cluster start {ray_start_s}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main, "bench_ray")
