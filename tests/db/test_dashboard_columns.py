"""bisects.metric and bisects.device_s: kept by the store, and filled in by migrations 0004 and 0007 for older
stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from alembic import command
from sqlalchemy import select

from bisector.db import Store
from bisector.db.engine import make_engine
from bisector.db.migrate import alembic_config, migration_connection
from bisector.db.schema import bisects
from bisector.vocab.domain import StepResult, Verdict

T0 = datetime(2026, 1, 2, tzinfo=UTC)


def columns(url: str) -> list[tuple[int, str, float]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            query = select(bisects.c.id, bisects.c.metric, bisects.c.device_s).order_by(bisects.c.id)
            return [tuple(row) for row in conn.execute(query)]
    finally:
        engine.dispose()


def fill(store: Store) -> None:
    plain = store.create_bisect("r", "a" * 40, "b" * 40, {"metric": r"latency_ms: ([0-9.]+)"}, T0)
    by_json = store.create_bisect("r", "a" * 40, "b" * 40, {"metric_json": "out.json:bench.tok_s"}, T0)
    store.create_bisect("r", "a" * 40, "b" * 40, {}, T0)
    for gpus, held_s in [((0, 1), 5.0), ((), 4.0), ((5,), 2.0)]:
        step = store.start_step(plain, "c" * 40, 1, "w", "n", gpus, T0)
        result = StepResult(step, "c" * 40, Verdict.GOOD, build_s=1.0, run_s=0.5)
        store.finish_step(step, result, T0 + timedelta(seconds=held_s))
    store.start_step(by_json, "c" * 40, 1, "w", "n", (0,), T0 + timedelta(seconds=1))  # still running: no time yet


def test_the_store_keeps_them_and_the_migration_recomputes_them(store_url: str) -> None:
    with Store.open(store_url) as store:
        fill(store)
    # GPU-seconds: (finished - started) x the GPUs held; the CPU-only step adds nothing.
    expected = [(1, "latency_ms", 2 * 5.0 + 1 * 2.0), (2, "bench.tok_s", 0.0), (3, "exit code", 0.0)]
    assert columns(store_url) == expected
    engine = make_engine(store_url)
    try:
        with migration_connection(engine) as conn:
            command.downgrade(alembic_config(conn), "0002")
    finally:
        engine.dispose()
    Store.open(store_url).close()  # upgrades to head again, filling the columns from the specs and the steps
    assert columns(store_url) == expected
