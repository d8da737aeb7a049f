"""Kill `bisect serve` at random moments while it runs several queued bisects over its shared slots, start it
again on the same address, and check what must hold once every job is done.

    python benchmarks/chaos_service.py [--jobs 4] [--slots 3] [--commits 200] [--sleep 0.3] [--kills 6]
        [--seed 1] [--db URL] [--work DIR] [--out FILE]

The jobs are submitted over HTTP (synthetic histories with planted culprits, one recipe). Until --kills kills
are spent, the server is SIGKILLed at a random moment, either alone (its workers must see their pipes close and
end their tests) or with its whole process group (workers and tests too), and started again at once on the same
port. Checked as in chaos_kill.py: every job's report names its planted culprit, no process of the run is left,
no commit got two verdicts, the SQLite store passes `PRAGMA integrity_check`; reported: kills, restarts and
steps per job.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from chaos_kill import add_soak_options, finish, integrity, marked_processes, search_steps, soak, verdict_conflicts
from common import ROOT, BenchmarkError, project_pythonpath, run_main

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "service"))  # the tests' harness of a `bisect serve` process

from service_process import ServiceProcess, ServiceStartError
from synthetic import RUN_CMD, culprit_history

TOKEN = "chaos-token"
DONE_LIMIT_S = 900.0  # all jobs, kills included: past it the benchmark fails
ORPHAN_WAIT_S = 30.0


def submit(server: ServiceProcess, body: dict[str, Any]) -> int:
    answer = server.post(body, authorization=f"Bearer {TOKEN}")
    answer.raise_for_status()
    return int(answer.json()["id"])


def start(server: ServiceProcess) -> None:
    try:
        server.start()
    except ServiceStartError as exc:
        raise BenchmarkError(str(exc)) from None


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work)
    rng = random.Random(args.seed)
    marker = f"{os.getpid()}-{time.time_ns()}"
    histories = []
    for index in range(args.jobs):
        culprit = rng.randint(1, args.commits)
        histories.append(culprit_history(work / f"repo-{index}", args.commits, culprit))
    config = work / "serve.toml"
    config.write_text(f'[recipes.synthetic]\nrun = "{RUN_CMD}"\n')
    serve_args = ["--db", args.db, "--config", str(config), "--slots", str(args.slots)]
    for history in histories:
        serve_args += ["--allow-repo", str(history.path)]
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("BISECT_TOKEN", "BISECT_DB")},
        "CHAOS_MARKER": marker, "PYTHONPATH": project_pythonpath(), "BISECT_TOKEN": TOKEN,
        "BISECT_DATA_DIR": str(work / "data"), "BISECT_CACHE_DIR": str(work / "cache"), "BISECT_GPUS": "",
        "BISECT_GPU_LOCK_DIR": str(work / "locks"), "SYNTHETIC_SLEEP_S": str(args.sleep),
    }  # fmt: skip
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    server = ServiceProcess(serve_args, env, stderr_dir=logs)
    start(server)
    ids = [
        submit(server, {"repo": str(h.path), "good": h.shas[0], "bad": "main", "recipe": "synthetic", "explain": False})
        for h in histories
    ]
    kills: list[str] = []
    deadline = time.monotonic() + DONE_LIMIT_S
    next_kill = time.monotonic() + rng.uniform(0.5, args.kill_window)
    try:
        while True:
            if time.monotonic() > deadline:
                raise BenchmarkError(f"jobs not done after {DONE_LIMIT_S:.0f} s")
            if len(kills) < args.kills and time.monotonic() >= next_kill:
                whole_group = rng.random() < 0.5
                server.kill(whole_group)
                kills.append("group" if whole_group else "server")
                start(server)
                next_kill = time.monotonic() + rng.uniform(0.5, args.kill_window)
            try:
                if all(server.job(i)["state"] == "done" for i in ids):
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        reports = [server.report(i) for i in ids]
    finally:
        server.stop()
    ended = time.monotonic()
    left = marked_processes(marker)
    while left and time.monotonic() - ended < ORPHAN_WAIT_S:
        time.sleep(0.5)
        left = marked_processes(marker)

    problems, rows = [], []
    for index, (history, bisect_id, report) in enumerate(zip(histories, ids, reports, strict=True)):
        planted = history.shas[history.first_bad]
        found = (report.get("first_bad") or {}).get("sha")
        if found != planted:
            problems.append(
                f"job {bisect_id}: {report.get('status')} {found} ({report.get('message')}), planted {planted[:12]}"
            )
        if args.db.startswith("sqlite:///"):
            problems += [f"job {bisect_id}: {c}" for c in verdict_conflicts(args.db, bisect_id)]
        decided, undecided = search_steps(report)
        rows.append({"job": index, "id": bisect_id, "status": report.get("status"), "correct": found == planted,
                     "search_steps_decided": decided, "search_steps_without_verdict": undecided})  # fmt: skip
    problems += [f"left running: pid {pid} {cmd[:120]}" for pid, cmd in left]
    checked = integrity(args.db) if args.db.startswith("sqlite:///") else "not checked"
    if checked not in ("ok", "not checked"):
        problems.append(f"store integrity: {checked}")
    return {"rows": rows, "kills": kills, "server_starts": server.starts, "problems": problems,
            "integrity": checked, "left_running": len(left)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4, help="bisects submitted, each on its own history")
    parser.add_argument("--slots", type=int, default=3, help="the server's shared worker slots")
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=0.3, help="seconds each synthetic test takes")
    parser.add_argument("--kills", type=int, default=6, help="server kills in all")
    parser.add_argument("--kill-window", type=float, default=4.0, help="a kill comes 0.5 s to this after a start")
    add_soak_options(parser)
    args = parser.parse_args()
    results = soak(args, run)
    for row in results["rows"]:
        print(f"job {row['id']}: {row['status']}, correct {row['correct']}, steps decided "
              f"{row['search_steps_decided']}, without a verdict {row['search_steps_without_verdict']}")  # fmt: skip
    print(
        f"kills {','.join(results['kills']) or '-'}; server started {results['server_starts']} times; store "
        f"integrity: {results['integrity']}; processes left: {results['left_running']}; {results['wall_s']} s"
    )
    return finish(args, results)


if __name__ == "__main__":
    run_main(main, "chaos_service")
