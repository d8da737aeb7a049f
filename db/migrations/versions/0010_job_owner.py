"""job owner: who submitted each job of `bisect serve` (the name of the token it came with; NULL for the jobs
stored before)

Revision ID: 0010_job_owner
Revises: 0009_ranges
Create Date: 2026-12-09
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_job_owner"
down_revision: str | Sequence[str] | None = "0009_ranges"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("owner", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("owner")
