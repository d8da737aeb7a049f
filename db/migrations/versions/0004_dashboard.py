"""bisects.metric (the metric's short name) and bisects.device_s (device seconds of its steps), for the
dashboard's filters and statistics, with their index

Revision ID: 0004_dashboard
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_dashboard"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _metric_label(spec: dict[str, object]) -> str:
    """A frozen copy of db.queries.metric_label at this revision."""
    metric_json = spec.get("metric_json")
    if isinstance(metric_json, str) and metric_json:
        return metric_json.rpartition(":")[2] or metric_json
    regex = spec.get("metric")
    if isinstance(regex, str) and regex:
        literal_text = re.split(r"[\\()\[\].*+?{}|^$]", regex, maxsplit=1)[0].strip(" :=\t")
        return literal_text or regex
    return "exit code"


def upgrade() -> None:
    with op.batch_alter_table("bisects") as batch:
        batch.add_column(sa.Column("metric", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("device_s", sa.Float(), nullable=False, server_default="0"))
    connection = op.get_bind()
    table = sa.table(
        "bisects", sa.column("id", sa.Integer()), sa.column("spec", sa.Text()), sa.column("metric", sa.Text())
    )
    rows = connection.execute(sa.select(table.c.id, table.c.spec)).fetchall()
    updates = [{"row_id": row.id, "label": _metric_label(json.loads(row.spec))} for row in rows]
    if updates:
        statement = table.update().where(table.c.id == sa.bindparam("row_id")).values(metric=sa.bindparam("label"))
        connection.execute(statement, updates)
    # Device seconds of finished steps: (build_s + run_s) x number of GPUs (commas of the JSON list + 1; 1 for []),
    # each time clamped to [0, 1e9] s as db.queries.step_device_seconds does.
    clamp = "CASE WHEN {0} > 1e9 THEN 1e9 WHEN {0} > 0 THEN {0} ELSE 0 END"
    busy = f"({clamp.format('build_s')} + {clamp.format('run_s')})"
    connection.execute(
        sa.text(
            f"UPDATE bisects SET device_s = COALESCE((SELECT SUM({busy} * "
            "CASE WHEN gpus = '[]' THEN 1 ELSE LENGTH(gpus) - LENGTH(REPLACE(gpus, ',', '')) + 1 END) "
            "FROM steps WHERE steps.bisect_id = bisects.id AND steps.verdict IS NOT NULL), 0)"
        )
    )
    op.create_index(
        "ix_bisects_repo_metric", "bisects", ["repo", "metric", "status", "created", "finished", "device_s"]
    )
    op.create_index("ix_candidates_bisect_id_sha", "candidates", ["bisect_id", "sha", "author"])
    op.create_index("ix_findings_bisect_id_kind", "findings", ["bisect_id", "kind", "file", "name"])


def downgrade() -> None:
    op.drop_index("ix_findings_bisect_id_kind", table_name="findings")
    op.drop_index("ix_candidates_bisect_id_sha", table_name="candidates")
    op.drop_index("ix_bisects_repo_metric", table_name="bisects")
    with op.batch_alter_table("bisects") as batch:
        batch.drop_column("device_s")
        batch.drop_column("metric")
