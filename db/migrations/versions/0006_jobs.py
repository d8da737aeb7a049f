"""jobs: the queue of `bisect serve` (queued, running, done), one row per submitted bisect

Revision ID: 0006_jobs
Revises: 0005_images
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_jobs"
down_revision: str | Sequence[str] | None = "0005_images"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)  # a frozen copy of db/schema.py's UTCDateTime at this revision


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("bisect_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("submitted", UTC_DATETIME, nullable=False),
        sa.Column("started", UTC_DATETIME, nullable=True),
        sa.Column("finished", UTC_DATETIME, nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["bisect_id"], ["bisects.id"], name="fk_jobs_bisect_id_bisects", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("bisect_id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_state_priority", "jobs", ["state", "priority", "submitted"])


def downgrade() -> None:
    op.drop_index("ix_jobs_state_priority", table_name="jobs")
    op.drop_table("jobs")
