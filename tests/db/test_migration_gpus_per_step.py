"""Migration 0008: a stored gpus_per_step of 0 meant the default (one GPU per step where the host has GPUs) before
it, and 0 means no GPU from it on; the default is stored as null."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from alembic import command
from sqlalchemy import select

from bisector.core.spec import BisectSpec
from bisector.db import Store
from bisector.db.engine import make_engine
from bisector.db.migrate import alembic_config, migration_connection
from bisector.db.schema import bisects
from bisector.runner.pipeline import step_request

T0 = datetime(2026, 1, 2, tzinfo=UTC)
SPEC = {"repo": "/r", "good": "a" * 40, "bad": "b" * 40, "run": "true"}
REQUEST = {"bisect_id": 1, "step_id": 1, "sha": "c" * 40, "attempt": 1, "repo": "/r", "log_path": "/l"}


def stored_gpus_per_step(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            specs = conn.execute(select(bisects.c.spec).order_by(bisects.c.id)).scalars()
            return [json.loads(spec).get("gpus_per_step", "absent") for spec in specs]
    finally:
        engine.dispose()


def test_a_spec_stored_with_0_before_0008_keeps_the_default_and_0_means_no_gpu_after_it(store_url: str) -> None:
    with Store.open(store_url) as store:
        for gpus in (None, 2, "absent", 0):
            spec = SPEC if gpus == "absent" else {**SPEC, "gpus_per_step": gpus}
            store.create_bisect("r", "a" * 40, "b" * 40, spec, T0)
    engine = make_engine(store_url)
    try:
        with migration_connection(engine) as conn:
            command.downgrade(alembic_config(conn), "0007_gpu_seconds")
    finally:
        engine.dispose()
    assert stored_gpus_per_step(store_url) == [0, 2, "absent", 0]  # as 0007 stores them: no value there means no GPU
    with Store.open(store_url) as store:  # upgraded to head
        specs = [BisectSpec.from_json(store.get_bisect(bisect_id).spec) for bisect_id in (1, 2, 3, 4)]
    assert stored_gpus_per_step(store_url) == [None, 2, "absent", None]
    assert [spec.executor.gpus_per_step for spec in specs] == [None, 2, None, None]
    assert [step_request(spec, **REQUEST, metric=spec.metric_spec()).no_gpu for spec in specs] == [False] * 4
