"""bisects.spec: a stored gpus_per_step of 0 (which meant the default, one GPU per step where the host has GPUs)
becomes null, the default's value now that 0 means a step without GPUs

Revision ID: 0008_gpus_per_step
Revises: 0007_gpu_seconds
Create Date: 2026-12-02
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_gpus_per_step"
down_revision: str | Sequence[str] | None = "0007_gpu_seconds"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = "gpus_per_step"


def _rewrite(old: object, new: object) -> None:
    """Store `new` as the gpus_per_step of every spec whose value is `old` (0 or None; never a bool)."""
    connection = op.get_bind()
    bisects = sa.table("bisects", sa.column("id", sa.Integer()), sa.column("spec", sa.Text()))
    query = sa.select(bisects.c.id, bisects.c.spec).where(bisects.c.spec.contains(f'"{KEY}"'))
    updates = []
    for row in connection.execute(query):
        spec = json.loads(row.spec)
        value = spec.get(KEY, False) if isinstance(spec, dict) else False
        if value is old or (type(value) is int and value == old):
            spec[KEY] = new
            updates.append({"row_id": row.id, "new_spec": json.dumps(spec)})
    if updates:
        statement = bisects.update().where(bisects.c.id == sa.bindparam("row_id"))
        connection.execute(statement.values(spec=sa.bindparam("new_spec")), updates)


def upgrade() -> None:
    _rewrite(0, None)


def downgrade() -> None:
    """The default's null goes back to 0; a spec of steps without GPUs (0) reads as the default there."""
    _rewrite(None, 0)
