"""`bisect serve`: 20 bisects submitted at once over 8 slots (issue #17's targets).

One synthetic history of 20 blocks; block k is good for its first t_k commits and bad after, so a bisect from a
block's first commit to its last has one known culprit, a different one per block. A real server (`bisect serve`
in a subprocess, local workers) gets the 20 requests from 20 client threads at once. From the store afterwards:

- slot utilisation while jobs wait: the share of slot-seconds busy with a step, from the first step's start until
  the last queued job started (target >= 90 %);
- submit-to-first-step: from the client sending the request to the bisect's first step, for the jobs that found
  a slot free (the first 8), and from a queued job's start to its first step (target < 1 s);
- every culprit right.

    python benchmarks/bench_service.py [--jobs 20] [--slots 8] [--block 24] [--test-s 1.0] [--out FILE]

Prints the result as JSON, then a summary against the targets; --out also writes the JSON to FILE.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_service.py` without PYTHONPATH

import httpx  # noqa: E402
from synthetic import write_history  # noqa: E402

from benchmarks.common import machine_info, project_pythonpath  # noqa: E402
from bisector.db.jobs import JobQueue  # noqa: E402
from bisector.db.store import Store  # noqa: E402

TOKEN = "bench-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_history(path: Path, jobs: int, block: int, seed: int) -> list[tuple[str, str, str]]:
    """(good, bad, culprit) per job: block k is good for t_k commits, then bad."""
    rng = random.Random(seed)
    verdicts: list[str] = []
    cuts = []
    for _ in range(jobs):
        cut = rng.randint(1, block - 1)
        cuts.append(cut)
        verdicts += ["good"] * cut + ["bad"] * (block - cut)
    history = write_history(path, verdicts)
    subprocess.run(["git", "-C", str(path), "checkout", "-q", "-f", "main"], check=True)
    return [
        (history.shas[k * block], history.shas[(k + 1) * block - 1], history.shas[k * block + cuts[k]])
        for k in range(jobs)
    ]


def start_server(port: int, repo: Path, home: Path, slots: int, test_s: float) -> subprocess.Popen[bytes]:
    config = home / "serve.toml"
    config.write_text(f'[recipes.synthetic]\nrun = "bash test.sh"\nenv = {{ SYNTHETIC_SLEEP_S = "{test_s}" }}\n')
    env = {**os.environ, "PYTHONPATH": project_pythonpath(), "BISECT_TOKEN": TOKEN,
           "BISECT_DATA_DIR": str(home / "data"), "BISECT_CACHE_DIR": str(home / "cache"), "BISECT_GPUS": "",
           "BISECT_GPU_LOCK_DIR": str(home / "locks")}  # fmt: skip
    command = [sys.executable, "-m", "bisector", "serve", "--port", str(port), "--db", str(home / "bisect.db"),
               "--allow-repo", str(repo), "--config", str(config), "--slots", str(slots)]  # fmt: skip
    log = home / "serve.stderr"
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, env=env, stderr=stderr, start_new_session=True)
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/openapi.json", timeout=5.0)
            return process
        except httpx.TransportError:
            if process.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
                raise SystemExit(f"bisect serve did not start: {tail[0]}") from None
            time.sleep(0.1)


def submit_all(base: str, repo: Path, ranges: list[tuple[str, str, str]]) -> list[tuple[int, datetime]]:
    """POST every range at once, each from a thread of its own. One client, made beforehand: a client made per
    request costs ~0.1 s of CPU (its TLS context), which on a small machine would be counted as the server's."""
    client = httpx.Client(limits=httpx.Limits(max_connections=len(ranges)), timeout=300.0)

    def submit(good_bad: tuple[str, str, str]) -> tuple[int, datetime]:
        body = {"repo": str(repo), "good": good_bad[0], "bad": good_bad[1], "recipe": "synthetic", "explain": False}
        sent = datetime.now(UTC)
        answer = client.post(f"{base}/api/bisects", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        if answer.status_code != 201:
            raise SystemExit(f"submission refused: {answer.status_code} {answer.text}")
        return int(answer.json()["id"]), sent

    with client, ThreadPoolExecutor(len(ranges)) as threads:
        return list(threads.map(submit, ranges))


def wait_all(base: str, ids: list[int]) -> None:
    while any(httpx.get(f"{base}/api/jobs/{i}", timeout=60.0).json()["state"] != "done" for i in ids):
        time.sleep(0.5)


def measure(
    db: Path, submitted: list[tuple[int, datetime]], ranges: list[tuple[str, str, str]], slots: int
) -> dict[str, Any]:
    with Store.open(str(db), read_only=True) as store:
        jobs = {bisect_id: JobQueue(store).get(bisect_id) for bisect_id, _ in submitted}
        steps = {bisect_id: store.steps(bisect_id) for bisect_id, _ in submitted}
        records = {bisect_id: store.get_bisect(bisect_id) for bisect_id, _ in submitted}
    for bisect_id, record in records.items():
        if not steps[bisect_id]:
            raise SystemExit(f"bisect {bisect_id} ran no step: {record.status.value}: {record.message}")
    all_steps = [s for listed in steps.values() for s in listed]
    first_step = min(s.started for s in all_steps)
    last_dequeued = max(job.started for job in jobs.values() if job.started is not None)
    window_s = (last_dequeued - first_step).total_seconds()
    busy_s = 0.0
    for step in all_steps:
        end = min(step.finished or last_dequeued, last_dequeued)
        start = max(step.started, first_step)
        busy_s += max((end - start).total_seconds(), 0.0)
    order = sorted(jobs.values(), key=lambda job: job.started or last_dequeued)
    immediate = {job.bisect_id for job in order[:slots]}
    sent_at = dict(submitted)
    to_first = {i: (min(s.started for s in steps[i]) - sent_at[i]).total_seconds() for i in immediate}
    # Where the first jobs' time went: the request's preparation, the wait for the scheduler, the coordinator's start.
    started = {i: jobs[i].started or last_dequeued for i in immediate}
    first = {i: min(s.started for s in steps[i]) for i in immediate}
    phases = {
        "queued_after_sent": [(jobs[i].submitted - sent_at[i]).total_seconds() for i in immediate],
        "started_after_queued": [(started[i] - jobs[i].submitted).total_seconds() for i in immediate],
        "first_step_after_started": [(first[i] - started[i]).total_seconds() for i in immediate],
    }
    dequeue_to_first = {
        job.bisect_id: (min(s.started for s in steps[job.bisect_id]) - job.started).total_seconds()
        for job in order[slots:]
        if job.started is not None
    }
    queued = sorted(job.submitted for job in jobs.values())
    # Submissions are prepared one at a time: the gaps between queued times are each one's preparation.
    preparation = [(b - a).total_seconds() for a, b in itertools.pairwise(queued)]
    right = sum(
        1 for (bisect_id, _), (_, _, culprit) in zip(submitted, ranges, strict=True)
        if records[bisect_id].first_bad == culprit
    )  # fmt: skip
    end = max(r.finished for r in records.values() if r.finished is not None)
    return {
        "utilisation_while_waiting": round(busy_s / (slots * window_s), 4) if window_s > 0 else None,
        "waiting_window_s": round(window_s, 2),
        "submit_to_first_step_s": {
            "median": round(statistics.median(to_first.values()), 3),
            "max": round(max(to_first.values()), 3),
        },
        "first_jobs_phases_median_s": {name: round(statistics.median(values), 3) for name, values in phases.items()},
        "preparation_s": {
            "median": round(statistics.median(preparation), 3) if preparation else None,
            "max": round(max(preparation), 3) if preparation else None,
        },
        "dequeue_to_first_step_s": {
            "median": round(statistics.median(dequeue_to_first.values()), 3) if dequeue_to_first else None,
            "max": round(max(dequeue_to_first.values()), 3) if dequeue_to_first else None,
        },
        "culprits_right": f"{right}/{len(submitted)}",
        "steps": len(all_steps),
        "total_s": round((end - min(sent_at.values())).total_seconds(), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--block", type=int, default=24, help="Commits per bisect.")
    parser.add_argument("--test-s", type=float, default=1.0, help="How long each test sleeps.")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--out", "--json", dest="out", type=Path, help="Also write the JSON result here.")
    args = parser.parse_args()
    info = machine_info()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        ranges = make_history(home / "repo", args.jobs, args.block, args.seed)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = start_server(port, home / "repo", home, args.slots, args.test_s)
        try:
            submitted = submit_all(base, home / "repo", ranges)
            wait_all(base, [i for i, _ in submitted])
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
        result = {
            "jobs": args.jobs, "slots": args.slots, "commits_per_bisect": args.block, "test_s": args.test_s,
            **measure(home / "bisect.db", submitted, ranges, args.slots), "machine": info,
        }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(summary(result), file=sys.stderr)


def summary(result: dict[str, Any]) -> str:
    """The targets of issue #17, met or missed, in a few lines."""
    utilisation = result["utilisation_while_waiting"]
    first = result["submit_to_first_step_s"]
    queued = result["dequeue_to_first_step_s"]
    right, total = (int(n) for n in result["culprits_right"].split("/"))

    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"

    lines = [
        f"{result['jobs']} jobs over {result['slots']} slots, {result['steps']} steps, {result['total_s']} s",
        f"slot utilisation while jobs wait: {utilisation:.1%} (target >= 90 %: {verdict(utilisation >= 0.9)})"
        if utilisation is not None
        else "slot utilisation while jobs wait: no job waited",
        f"submit to first step: median {first['median']} s, max {first['max']} s "
        f"(target < 1 s: {verdict(first['max'] < 1.0)}); a queued job's start to its first step: "
        f"median {queued['median']} s, max {queued['max']} s",
        f"culprits right: {right}/{total} ({verdict(right == total)})",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
