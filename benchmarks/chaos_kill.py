"""Kill gpu-bisect at random moments while several bisects share one store and one machine, resume each, and
check what must hold afterwards.

    python benchmarks/chaos_kill.py [--bisects 4] [--commits 200] [--workers 3] [--sleep 0.3] [--kills 5]
        [--executor local|ray] [--images] [--one-repo] [--seed 1] [--db URL] [--work DIR] [--out FILE]

Each bisect has a synthetic history of its own with a planted culprit (synthetic; --sleep seconds a
test), or with --one-repo all bisect one history, sharing its worktree slots. A driver thread per bisect runs
`bisect start` in a session of its own and, while its kill budget lasts, SIGKILLs at a random moment one of:
- group: the coordinator's whole process group (the coordinator, its fork server and workers, the running
  tests' shells), as `kill -9 -PGID` or an OOM kill of the job would;
- coordinator: the coordinator alone; its workers and their tests must end by themselves;
- worker: one of the coordinator's Python descendants (a worker, the fork server the workers are forked from, or
  multiprocessing's resource tracker); a lost step must be rerun as an infrastructure error, and a slot started
  again.
After a kill that ended the coordinator the driver runs `bisect resume ID` (or `bisect start` again while the
bisect was not stored yet); the last run goes to its end, or with --cancels P (a chance per bisect) gets a
`bisect cancel ID` at a random moment, and must then end `cancelled` (or found, when it ended first). Every
process carries a marker in its environment, and the data, cache and store live under --work, so nothing of the
user's is touched.

Checked afterwards (exit 1 if any fails, each failure on a line of its own):
- every bisect's report names its planted culprit;
- no process carrying this run's marker is left 30 s after the last driver ended (tests, workers, fork servers;
  120 s with Ray, whose agents outlive a killed local cluster by about a minute);
- no commit of a bisect got two different verdicts, and a SQLite store passes `PRAGMA integrity_check`.
Reported besides: kills by kind, runs per bisect, steps per bisect (search steps with a verdict, steps that
ended without one) against a bisect of the same history that nobody killed, commits decided more than once, and
worktrees per repository (one per slot, kept for reuse; a resume that starts while the killed run's workers still
hold their slots locks the next ones, so up to the most workers ever alive at once).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import ROOT, BenchmarkError, load_average, machine_info, project_pythonpath, run_main, write_results

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from synthetic import RUN_CMD, culprit_history

KILL_KINDS = ("group", "coordinator", "worker")
RUN_LIMIT_S = 600.0  # one start or resume that takes longer than this is stuck: the benchmark fails
# How long the run's processes may outlive its last bisect. A local Ray cluster's agents (DashboardAgent,
# RuntimeEnvAgent) notice a killed coordinator's raylet is gone only after about a minute.
ORPHAN_WAIT_S = {"local": 30.0, "ray": 120.0}
# --images: a build that takes a while and marks its image complete as its last act, and a test that refuses an
# image without the mark (exit 3: a bad verdict, so a reused half-built image shows as a wrong culprit)
IMAGE_BUILD = 'sleep 0.5 && bash build.sh && touch "$BISECT_IMAGE_DIR/.complete"'
IMAGE_RUN = f'test -f "$BISECT_IMAGE_DIR/.complete" || {{ echo "$BISECT_IMAGE_ID incomplete"; exit 3; }}; {RUN_CMD}'
_BISECT_ID = re.compile(r"^bisect (\d+):", re.MULTILINE)


@dataclass
class Outcome:
    """One bisect's course under kills."""

    index: int
    culprit_sha: str
    bisect_id: int | None = None
    runs: list[str] = field(default_factory=list)  # "start" / "resume", one per process started
    kills: list[str] = field(default_factory=list)
    final_exit: int | None = None
    cancelled: bool = False  # a `bisect cancel` was accepted
    cancel_answer: str | None = None  # what `bisect cancel` said
    report: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)


def _descendants(root: int) -> list[int]:
    """Every process below root, from one read of each process's parent in /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, queue = [], list(children.get(root, []))
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def _workers_of(coordinator: int) -> list[int]:
    """The coordinator's worker-side descendants: the fork server, the workers forked from it and multiprocessing's
    resource tracker, or with Ray the processes of its StepActors (`ray::StepActor...`); not tests, shells or
    Ray's own daemons. Nor a child the coordinator forked that has not yet run what it was forked for (a git
    command, say): it still has the coordinator's command line."""
    found = []
    try:
        own = Path(f"/proc/{coordinator}/cmdline").read_bytes()
    except OSError:
        return found
    for pid in _descendants(coordinator):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        argv0 = cmdline.split(b"\0", 1)[0]
        local = argv0.endswith((b"python", b"python3")) or b"/python3." in argv0
        if cmdline == own:
            continue
        if argv0.startswith(b"ray::StepActor") or (local and b"ray" not in cmdline):
            found.append(pid)
    return found


def marked_processes(marker: str) -> list[tuple[int, str]]:
    """Processes whose environment holds CHAOS_MARKER=marker, with their command lines."""
    needle = f"CHAOS_MARKER={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cmdline:  # a zombie has none: its parent reaps it
            found.append((int(entry.name), cmdline))
    return found


class Driver(threading.Thread):
    """Runs one bisect to its end through `--kills` random kills."""

    def __init__(
        self, outcome: Outcome, repo: Path, good: str, bad: str, args: argparse.Namespace, env: dict[str, str]
    ):
        super().__init__(name=f"bisect-{outcome.index}", daemon=True)
        self.outcome, self.repo, self.good, self.bad, self.args, self.env = outcome, repo, good, bad, args, env
        self.rng = random.Random(f"{args.seed}-{outcome.index}")
        self.logs = Path(args.work) / f"logs-{outcome.index}"
        self.logs.mkdir(parents=True, exist_ok=True)

    def _argv(self) -> list[str]:
        common = ["--db", self.args.db, "--format", "json"]
        if self.outcome.bisect_id is None:
            self.outcome.runs.append("start")
            images = ["--image", "venv", "--build", IMAGE_BUILD, "--run", IMAGE_RUN] if self.args.images else []
            return [
                "start", "--repo", str(self.repo), "--good", self.good, "--bad", self.bad, "--run", RUN_CMD,
                "--workers", str(self.args.workers), "--executor", self.args.executor, "--no-explain", *images,
                *common,
            ]  # fmt: skip
        self.outcome.runs.append("resume")
        return ["resume", str(self.outcome.bisect_id), *common]

    def _learn_id(self, stderr: Path) -> None:
        if self.outcome.bisect_id is None:
            found = _BISECT_ID.search(stderr.read_text(errors="replace"))
            if found:
                self.outcome.bisect_id = int(found[1])

    def run(self) -> None:
        kills_left = self.args.kills
        will_cancel = self.rng.random() < self.args.cancels
        while True:
            run = len(self.outcome.runs)
            argv = self._argv()
            stdout, stderr = self.logs / f"run-{run}.out", self.logs / f"run-{run}.err"
            with stdout.open("wb") as out, stderr.open("wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "bisector", *argv],
                    env=self.env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
                started = time.monotonic()
                kill_at = started + self.rng.uniform(0.2, self.args.kill_window) if kills_left else None
                cancel_at = None
                if will_cancel and not kills_left:  # in the last run: cancelled while it goes, or after its end
                    cancel_at = started + self.rng.uniform(0.2, self.args.kill_window)
                killed_coordinator = False
                while proc.poll() is None:
                    if time.monotonic() - started > RUN_LIMIT_S:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                        self.outcome.problems.append(f"{argv[0]} ran over {RUN_LIMIT_S:.0f} s: killed")
                        return
                    if cancel_at is not None and time.monotonic() >= cancel_at:
                        self._learn_id(stderr)
                        if self.outcome.bisect_id is not None:
                            cancel_at = None
                            self._cancel()
                    if kill_at is not None and time.monotonic() >= kill_at:
                        kind = self._kill(proc.pid)
                        kill_at = None
                        kills_left -= 1
                        killed_coordinator = kind in ("group", "coordinator")
                        if kind == "worker" and kills_left:
                            kill_at = time.monotonic() + self.rng.uniform(0.2, self.args.kill_window)
                    time.sleep(0.02)
            self._learn_id(stderr)
            if not killed_coordinator:
                self.outcome.final_exit = proc.returncode
                if stdout.stat().st_size:
                    try:
                        self.outcome.report = json.loads(stdout.read_text())
                    except ValueError:
                        self.outcome.problems.append(f"run {run}: stdout is not a JSON report")
                if self.outcome.report is None and argv[0] == "resume" and "nothing to resume" in stderr.read_text():
                    self.outcome.report = self._stored_report()  # the killed run had stored its end already
                if self.outcome.report is None:
                    tail = stderr.read_text(errors="replace").strip().splitlines()[-1:]
                    self.outcome.problems.append(f"run {run} exited {proc.returncode} without a report: {tail}")
                return

    def _stored_report(self) -> dict[str, Any] | None:
        argv = [sys.executable, "-m", "bisector", "report", str(self.outcome.bisect_id), "--db", self.args.db]
        done = subprocess.run([*argv, "--format", "json"], env=self.env, capture_output=True, text=True, timeout=120)
        report: dict[str, Any] | None = json.loads(done.stdout) if done.returncode in (0, 3) else None
        return report

    def _cancel(self) -> None:
        """`bisect cancel ID`, as a user would while the bisect runs."""
        argv = [sys.executable, "-m", "bisector", "cancel", str(self.outcome.bisect_id), "--db", self.args.db]
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=120)
        self.outcome.cancelled = done.returncode == 0
        self.outcome.cancel_answer = (done.stdout + done.stderr).strip()[-200:]
        if done.returncode not in (0, 2):  # 2: already ended, one line that says so
            self.outcome.problems.append(f"bisect cancel exited {done.returncode}: {done.stderr.strip()[-200:]}")

    def _kill(self, coordinator: int) -> str:
        kind = self.rng.choice(KILL_KINDS)
        workers = _workers_of(coordinator) if kind == "worker" else []
        if kind == "worker" and not workers:
            kind = "coordinator"
        if kind == "group":
            os.killpg(coordinator, signal.SIGKILL)
        elif kind == "coordinator":
            os.kill(coordinator, signal.SIGKILL)
        else:
            os.kill(self.rng.choice(workers), signal.SIGKILL)
        self.outcome.kills.append(kind)
        return kind


def verdict_conflicts(db: str, bisect_id: int) -> list[str]:
    """Commits of the bisect that got both good and bad (the synthetic tests are deterministic)."""
    path = db.removeprefix("sqlite:///")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT sha, GROUP_CONCAT(DISTINCT verdict) FROM steps WHERE bisect_id = ? AND verdict IN ('good', 'bad')"
            " GROUP BY sha HAVING COUNT(DISTINCT verdict) > 1",
            (bisect_id,),
        ).fetchall()
    return [f"{sha[:12]} got {verdicts}" for sha, verdicts in rows]


def integrity(db: str) -> str:
    with sqlite3.connect(f"file:{db.removeprefix('sqlite:///')}?mode=ro", uri=True) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def search_steps(report: dict[str, Any]) -> tuple[int, int]:
    search = [s for s in report.get("steps", []) if s.get("purpose") == "search"]
    decided = sum(1 for s in search if s.get("verdict") in ("good", "bad", "skip"))
    return decided, len(search) - decided


def _worktrees(repo: Path) -> int:
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True, text=True)
    return sum(1 for line in listed.stdout.splitlines() if line.startswith("worktree ")) - 1


def add_soak_options(parser: argparse.ArgumentParser) -> None:
    """The options every soak takes: its seed, its store, its scratch dir and where its results go."""
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--db", help="the store (default: a SQLite file under --work)")
    parser.add_argument("--work", help="where histories, data and caches go (default: a fresh temporary dir)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")


def soak(args: argparse.Namespace, body: Callable[[argparse.Namespace], dict[str, Any]]) -> dict[str, Any]:
    """body's results, run in --work (a temporary dir by default) on --db (a SQLite file there by default), with
    the wall time, the parameters and the machine added."""
    with tempfile.TemporaryDirectory(prefix="chaos-") as scratch:
        args.work = args.work or scratch
        args.db = args.db or f"sqlite:///{Path(args.work) / 'store.db'}"
        started = time.monotonic()
        results = body(args)
        results["wall_s"] = round(time.monotonic() - started, 1)
    results.update(parameters={k: v for k, v in vars(args).items() if k != "out"}, machine=machine_info(),
                   load_average=load_average())  # fmt: skip
    return results


def finish(args: argparse.Namespace, results: dict[str, Any]) -> int:
    """Write --out; a broken promise ends the soak with one line per problem (exit 1)."""
    if args.out:
        write_results(args.out, results)
    if results["problems"]:
        raise BenchmarkError("; ".join(results["problems"]))
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work)
    marker = f"{os.getpid()}-{time.time_ns()}"
    env = {
        **os.environ,
        "CHAOS_MARKER": marker,
        "PYTHONPATH": project_pythonpath(),
        "BISECT_DATA_DIR": str(work / "data"),
        "BISECT_CACHE_DIR": str(work / "cache"),
        "SYNTHETIC_SLEEP_S": str(args.sleep),
    }
    rng = random.Random(args.seed)
    drivers, baselines = [], {}
    shared = culprit_history(work / "repo", args.commits, rng.randint(1, args.commits)) if args.one_repo else None
    for index in range(args.bisects):
        culprit = shared.first_bad if shared else rng.randint(1, args.commits)
        history = shared or culprit_history(work / f"repo-{index}", args.commits, culprit)
        outcome = Outcome(index, history.shas[culprit])
        drivers.append(Driver(outcome, history.path, history.shas[0], history.shas[-1], args, env))
    for driver in drivers:
        driver.start()
    for driver in drivers:
        driver.join()
    ended = time.monotonic()
    left = marked_processes(marker)
    while left and time.monotonic() - ended < ORPHAN_WAIT_S[args.executor]:
        time.sleep(0.5)
        left = marked_processes(marker)
    lingered = round(time.monotonic() - ended, 1)
    # The same histories bisected once more by a run nobody kills, for the steps an undisturbed bisect takes.
    for driver in drivers:
        calm = Outcome(driver.outcome.index, driver.outcome.culprit_sha)
        quiet = argparse.Namespace(**{**vars(args), "kills": 0, "cancels": 0.0})
        Driver(calm, driver.repo, driver.good, driver.bad, quiet, env).run()
        baselines[driver.outcome.index] = search_steps(calm.report) if calm.report else None

    problems: list[str] = []
    rows = []
    for driver in drivers:
        outcome = driver.outcome
        problems += [f"bisect {outcome.index}: {p}" for p in outcome.problems]
        report = outcome.report or {}
        found = (report.get("first_bad") or {}).get("sha")
        if outcome.cancelled and report.get("status") != "cancelled" and found != outcome.culprit_sha:
            problems.append(f"bisect {outcome.index}: cancelled, yet {report.get('status')} {found}")
        elif not outcome.cancelled and found != outcome.culprit_sha:
            problems.append(
                f"bisect {outcome.index} (id {outcome.bisect_id}): {report.get('status')} {found}"
                f" ({report.get('message')}), planted {outcome.culprit_sha[:12]}"
            )
        if outcome.bisect_id is not None and args.db.startswith("sqlite:///"):
            problems += [f"bisect {outcome.index}: {c}" for c in verdict_conflicts(args.db, outcome.bisect_id)]
        decided, undecided = search_steps(report) if report else (None, None)
        worktrees = _worktrees(driver.repo)
        rows.append({
            "bisect": outcome.index, "id": outcome.bisect_id, "status": report.get("status"),
            "correct": found == outcome.culprit_sha, "cancelled": outcome.cancelled,
            "cancel_answer": outcome.cancel_answer, "kills": outcome.kills,
            "runs": outcome.runs,
            "search_steps_decided": decided, "search_steps_without_verdict": undecided,
            "undisturbed_steps_decided": (baselines[outcome.index] or (None,))[0],
            "worktrees_left": worktrees,
        })  # fmt: skip
    problems += [f"left running: pid {pid} {cmd[:120]}" for pid, cmd in left]
    checked = integrity(args.db) if args.db.startswith("sqlite:///") else "not checked"
    if checked not in ("ok", "not checked"):
        problems.append(f"store integrity: {checked}")
    return {"rows": rows, "problems": problems, "integrity": checked, "left_running": len(left),
            "lingered_s": lingered}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bisects", type=int, default=4, help="bisects run at once, each on its own history")
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.3, help="seconds each synthetic test takes")
    parser.add_argument("--kills", type=int, default=5, help="kills per bisect")
    parser.add_argument("--kill-window", type=float, default=3.0, help="a kill comes 0.2 s to this after a start")
    parser.add_argument("--executor", default="local", choices=("local", "ray"), help="the bisects' workers")
    parser.add_argument("--cancels", type=float, default=0.0, help="chance that a bisect is cancelled at the end")
    parser.add_argument("--images", action="store_true", help="--image venv, builds killed mid-way included")
    parser.add_argument("--one-repo", action="store_true", help="every bisect on one history (shared worktrees)")
    add_soak_options(parser)
    args = parser.parse_args()
    results = soak(args, run)
    for row in results["rows"]:
        print(
            f"bisect {row['bisect']} (id {row['id']}): {row['status']}, correct {row['correct']}, "
            f"{'cancelled, ' if row['cancelled'] else ''}"
            f"kills {','.join(row['kills']) or '-'}, runs {len(row['runs'])}, steps decided "
            f"{row['search_steps_decided']} (undisturbed {row['undisturbed_steps_decided']}), without a verdict "
            f"{row['search_steps_without_verdict']}, worktrees left {row['worktrees_left']}"
        )
    print(f"store integrity: {results['integrity']}; processes left: {results['left_running']} (the last ended "
          f"{results['lingered_s']} s after the bisects); "
          f"{results['wall_s']} s")  # fmt: skip
    return finish(args, results)


if __name__ == "__main__":
    run_main(main, "chaos_kill")
