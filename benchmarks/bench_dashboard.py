"""The look-back queries on a large store: list, show and stats through the CLI's functions and over HTTP.

Generates a store of --bisects bisects with --steps-per-bisect steps each (10,000 x 50 = 500,000 steps by
default), 30 candidates each and a few findings per found bisect, by bulk inserts through SQLAlchemy core, on
SQLite (a file) and, with --postgres URL (a role that may CREATE DATABASE), on a fresh PostgreSQL database.
Then times, --runs times each (median and max reported):

- list:  history.find_bisects (newest 50, no filter) and with --status/--culprit filters; GET /api/bisects
- show:  BisectReport.load + to_json of one bisect; GET /api/bisects/{id}
- stats: history.compute_stats over every bisect, and for one repository; GET /api/stats

python benchmarks/bench_dashboard.py [--bisects 10000] [--steps-per-bisect 50] [--runs 15]
    [--postgres postgresql+psycopg://bisect:bisect@127.0.0.1/postgres] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, insert, make_url, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, machine_info, write_results
from bisector.db.queries import metric_label
from bisector.db.schema import bisects, candidates, findings, steps
from bisector.db.store import Store
from bisector.report import BisectReport, report_json
from bisector.report.history import compute_stats, find_bisects, parse_filter

REPOS = [f"/srv/repos/model-{i}" for i in range(8)]
METRICS = [r"tokens/s: ([0-9.]+)", r"latency_ms: ([0-9.]+)", None]
STATUSES = ["found"] * 7 + ["ambiguous", "not_reproducible", "endpoints_mismatch", "failed", "cancelled"]
CANDIDATES_PER_BISECT = 30
BATCH = 20_000


def sha(rng: random.Random) -> str:
    return f"{rng.getrandbits(160):040x}"


def generate(url: str, n_bisects: int, steps_per: int, seed: int = 7) -> dict[str, Any]:
    """Fill the (migrated, empty) store at url; returns a culprit SHA and a repo to filter by."""
    rng = random.Random(seed)
    engine = create_engine(url)
    t0 = datetime(2026, 1, 5, tzinfo=UTC)
    b_rows: list[dict[str, Any]] = []
    c_rows: list[dict[str, Any]] = []
    s_rows: list[dict[str, Any]] = []
    f_rows: list[dict[str, Any]] = []
    culprit = ""
    started_gen = time.perf_counter()

    def flush(force: bool = False) -> None:
        with engine.begin() as conn:
            for table, rows in ((bisects, b_rows), (candidates, c_rows), (steps, s_rows), (findings, f_rows)):
                if rows and (force or len(rows) >= BATCH or table is bisects):
                    conn.execute(insert(table), rows)
                    rows.clear()

    for bisect_id in range(1, n_bisects + 1):
        created = t0 + timedelta(minutes=30 * bisect_id + rng.random())
        status = rng.choice(STATUSES)
        shas = [sha(rng) for _ in range(CANDIDATES_PER_BISECT)]
        boundary = rng.randrange(1, CANDIDATES_PER_BISECT)
        metric = rng.choice(METRICS)
        spec = {"repo": "", "good": shas[0], "bad": shas[-1], "run": "bash test.sh", "metric": metric,
                "expect": ">= 8" if metric else None, "executor": "ray", "workers": 8}  # fmt: skip
        b_rows.append({
            "id": bisect_id, "repo": rng.choice(REPOS), "good": shas[0], "bad": shas[-1], "spec": json.dumps(spec),
            "status": status, "created": created, "finished": created + timedelta(seconds=rng.uniform(60, 7200)),
            "first_bad": shas[boundary] if status in ("found", "ambiguous") else None,
            "last_good": shas[boundary - 1] if status in ("found", "ambiguous") else None,
            "message": "", "extra": "{}", "metric": metric_label(spec),
            "device_s": steps_per * 30.0,  # each step: build 10 s + run 20 s on one GPU
        })  # fmt: skip
        if status == "found" and not culprit:
            culprit = shas[boundary]
        c_rows += [
            {"bisect_id": bisect_id, "position": p, "sha": s, "subject": f"change {p} (#{p + 100})",
             "author": f"Dev {rng.randrange(40)} <dev@example.com>", "date": created, "pr": p + 100}
            for p, s in enumerate(shas)
        ]  # fmt: skip
        for n in range(steps_per):
            position = rng.randrange(CANDIDATES_PER_BISECT)
            good = position < boundary
            s_rows.append({
                "bisect_id": bisect_id, "sha": shas[position], "attempt": 1, "worker": f"w{n % 8}",
                "node": f"node{n % 4}", "gpus": json.dumps([n % 8]), "started": created + timedelta(seconds=n),
                "finished": created + timedelta(seconds=n + 30), "build_s": 10.0, "run_s": 20.0, "exit_code": 0,
                "verdict": "good" if good else "bad", "samples": json.dumps([10.0 if good else 5.0]),
                "log_path": f"/data/logs/bisect-{bisect_id}/step-{n}.log", "detail": "", "purpose": "search",
            })  # fmt: skip
        if status == "found":
            f_rows += [
                {"bisect_id": bisect_id, "kind": "table_entry", "file": f"kernels/tuning_{rng.randrange(12)}.py",
                 "name": f"TABLE_{rng.randrange(20)}", "key": "[1]", "before": "1", "after": "2", "line": 3,
                 "detail": ""}
                for _ in range(3)
            ]  # fmt: skip
        if len(s_rows) >= BATCH:
            flush()
    flush(force=True)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":  # ids were given explicitly: move the sequence past them
            conn.execute(text("SELECT setval(pg_get_serial_sequence('bisects', 'id'), (SELECT max(id) FROM bisects))"))
        conn.execute(text("ANALYZE"))
    engine.dispose()
    return {"culprit": culprit, "repo": REPOS[0], "generate_s": time.perf_counter() - started_gen}


def timed(function: Callable[[], object], runs: int) -> dict[str, float]:
    function()  # warm: caches, imports, first connection
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1000)
    return {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}


@contextmanager
def fresh_postgres(admin_url: str) -> Iterator[str]:
    admin = create_engine(make_url(admin_url), isolation_level="AUTOCOMMIT")
    name = f"bisect_bench_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    Store.open(url).close()  # migrate
    facts = generate(url, args.bisects, args.steps_per_bisect)
    results: dict[str, Any] = {"generate_s": round(facts["generate_s"], 1)}
    show_id = args.bisects // 2
    with Store.open(url) as store:
        everything = parse_filter()
        found = parse_filter(status="found")
        by_culprit = parse_filter(culprit=facts["culprit"][:10])
        one_repo = parse_filter(repo=facts["repo"])
        results["cli"] = {
            "list": timed(lambda: find_bisects(store, everything, 50), args.runs),
            "list --status found": timed(lambda: find_bisects(store, found, 50), args.runs),
            "list --culprit SHA": timed(lambda: find_bisects(store, by_culprit, 50), args.runs),
            "show": timed(lambda: report_json(BisectReport.load(store, show_id)), args.runs),
            "stats": timed(lambda: compute_stats(store, everything), args.runs),
            "stats --repo": timed(lambda: compute_stats(store, one_repo), args.runs),
        }
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "dashboard"))
    from server import running_dashboard

    with running_dashboard(url, Path(tempfile.mkdtemp())) as base, httpx.Client(base_url=base, timeout=60) as client:
        results["http"] = {
            "GET /api/bisects": timed(lambda: client.get("/api/bisects").raise_for_status(), args.runs),
            "GET /api/bisects?status=found": timed(
                lambda: client.get("/api/bisects?status=found").raise_for_status(), args.runs
            ),
            f"GET /api/bisects/{show_id}": timed(
                lambda: client.get(f"/api/bisects/{show_id}").raise_for_status(), args.runs
            ),
            "GET /api/stats": timed(lambda: client.get("/api/stats").raise_for_status(), args.runs),
            "GET /api/stats?repo=": timed(
                lambda: client.get("/api/stats", params={"repo": facts["repo"]}).raise_for_status(), args.runs
            ),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bisects", type=int, default=10_000)
    parser.add_argument("--steps-per-bisect", type=int, default=50)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--postgres", help="admin URL of a PostgreSQL server (a fresh database is made and dropped)")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_dashboard.json")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "bisects": args.bisects,
        "steps": args.bisects * args.steps_per_bisect,
    }
    with tempfile.TemporaryDirectory() as folder:
        report["sqlite"] = measure(f"sqlite:///{folder}/bench.db", args)
        print(json.dumps(report["sqlite"], indent=1), flush=True)
    if args.postgres:
        with fresh_postgres(args.postgres) as url:
            report["postgresql"] = measure(url, args)
            print(json.dumps(report["postgresql"], indent=1), flush=True)
    write_results(args.out, report)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
