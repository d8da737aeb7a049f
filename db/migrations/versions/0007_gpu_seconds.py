"""bisects.device_s counts GPU-seconds by the report's rule: (finished - started) x the GPUs a step held, a
CPU-only step adding 0 (0004 counted (build_s + run_s) x the GPUs, a CPU-only step as one device)

Revision ID: 0007_gpu_seconds
Revises: 0006_jobs
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0007_gpu_seconds"
down_revision: str | Sequence[str] | None = "0006_jobs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)  # a frozen copy of db/schema.py's UTCDateTime at this revision
MAX_STEP_S = 1e9  # a frozen copy of vocab.cost.MAX_STEP_S at this revision


def _gpu_seconds(gpus: str, started: datetime, finished: datetime) -> float:
    """A frozen copy of vocab.cost.gpu_seconds at this revision (SQLite reads datetimes back without offset)."""
    count = len(json.loads(gpus or "[]"))
    if not count:
        return 0.0
    started, finished = (t if t.tzinfo else t.replace(tzinfo=UTC) for t in (started, finished))
    return min(max((finished - started).total_seconds(), 0.0), MAX_STEP_S) * count


def upgrade() -> None:
    connection = op.get_bind()
    steps = sa.table(
        "steps",
        sa.column("bisect_id", sa.Integer()),
        sa.column("gpus", sa.Text()),
        sa.column("started", UTC_DATETIME),
        sa.column("finished", UTC_DATETIME),
        sa.column("verdict", sa.Text()),
    )
    bisects = sa.table("bisects", sa.column("id", sa.Integer()), sa.column("device_s", sa.Float()))
    query = sa.select(steps.c.bisect_id, steps.c.gpus, steps.c.started, steps.c.finished).where(
        steps.c.verdict.is_not(None), steps.c.finished.is_not(None), steps.c.gpus != "[]"
    )
    totals: dict[int, float] = defaultdict(float)
    for row in connection.execute(query):
        totals[row.bisect_id] += _gpu_seconds(row.gpus, row.started, row.finished)
    connection.execute(bisects.update().values(device_s=0.0))
    updates = [{"row_id": bisect_id, "seconds": seconds} for bisect_id, seconds in totals.items()]
    if updates:
        statement = bisects.update().where(bisects.c.id == sa.bindparam("row_id"))
        connection.execute(statement.values(device_s=sa.bindparam("seconds")), updates)


def downgrade() -> None:
    clamp = "CASE WHEN {0} > 1e9 THEN 1e9 WHEN {0} > 0 THEN {0} ELSE 0 END"
    busy = f"({clamp.format('build_s')} + {clamp.format('run_s')})"
    devices = "CASE WHEN gpus = '[]' THEN 1 ELSE LENGTH(gpus) - LENGTH(REPLACE(gpus, ',', '')) + 1 END"
    op.get_bind().execute(
        sa.text(
            f"UPDATE bisects SET device_s = COALESCE((SELECT SUM({busy} * {devices}) FROM steps "
            "WHERE steps.bisect_id = bisects.id AND steps.verdict IS NOT NULL), 0)"
        )
    )
