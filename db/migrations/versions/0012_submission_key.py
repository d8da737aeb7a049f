"""jobs.submission_key: the key a client sent with its submission (`Idempotency-Key`), unique per owner, so that a
retried submission is answered with the job it made (NULL: sent without one, as the jobs stored before)

Revision ID: 0012_submission_key
Revises: 0011_lease_ttl
Create Date: 2026-12-14
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_submission_key"
down_revision: str | Sequence[str] | None = "0011_lease_ttl"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("submission_key", sa.Text(), nullable=True))
        batch.create_index("ux_jobs_owner_submission_key", ["owner", "submission_key"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ux_jobs_owner_submission_key")
        batch.drop_column("submission_key")
