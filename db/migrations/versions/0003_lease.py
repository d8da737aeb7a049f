"""bisects.owner, bisects.heartbeat: the lease of the coordinator that runs a bisect

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)  # a frozen copy of db/schema.py's UTCDateTime at this revision


def upgrade() -> None:
    with op.batch_alter_table("bisects") as batch:
        batch.add_column(sa.Column("owner", sa.Text(), nullable=True))
        batch.add_column(sa.Column("heartbeat", UTC_DATETIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bisects") as batch:
        batch.drop_column("heartbeat")
        batch.drop_column("owner")
