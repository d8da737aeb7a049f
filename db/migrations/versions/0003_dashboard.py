"""bisects.metric (the metric's short name, for filters and statistics) and the dashboard's indexes

Revision ID: 0003_dashboard
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_dashboard"
down_revision: str | Sequence[str] | None = "0002"
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
    connection = op.get_bind()
    table = sa.table(
        "bisects", sa.column("id", sa.Integer()), sa.column("spec", sa.Text()), sa.column("metric", sa.Text())
    )
    rows = connection.execute(sa.select(table.c.id, table.c.spec)).fetchall()
    updates = [{"row_id": row.id, "label": _metric_label(json.loads(row.spec))} for row in rows]
    if updates:
        statement = table.update().where(table.c.id == sa.bindparam("row_id")).values(metric=sa.bindparam("label"))
        connection.execute(statement, updates)
    op.create_index("ix_bisects_repo_metric", "bisects", ["repo", "metric"])
    op.create_index("ix_steps_bisect_id_busy", "steps", ["bisect_id", "build_s", "run_s", "gpus"])


def downgrade() -> None:
    op.drop_index("ix_steps_bisect_id_busy", table_name="steps")
    op.drop_index("ix_bisects_repo_metric", table_name="bisects")
    with op.batch_alter_table("bisects") as batch:
        batch.drop_column("metric")
