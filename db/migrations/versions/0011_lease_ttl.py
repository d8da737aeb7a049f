"""bisects.lease_ttl_s: the TTL of the coordinator holding a bisect's lease, by which a claimant judges it gone
(NULL for the leases taken before: judged by the claimant's own TTL)

Revision ID: 0011_lease_ttl
Revises: 0010_job_owner
Create Date: 2026-12-12
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_lease_ttl"
down_revision: str | Sequence[str] | None = "0010_job_owner"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("bisects") as batch:
        batch.add_column(sa.Column("lease_ttl_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bisects") as batch:
        batch.drop_column("lease_ttl_s")
