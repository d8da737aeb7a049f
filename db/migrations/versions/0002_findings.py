"""findings, steps.purpose: explanation rows (tables, thresholds, runtime dispatch, minimisation)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ENUM = sa.String(32)


def upgrade() -> None:
    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("bisect_id", sa.Integer(), nullable=False),
        sa.Column("kind", ENUM, nullable=False),
        sa.Column("file", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("before", sa.Text(), nullable=True),
        sa.Column("after", sa.Text(), nullable=True),
        sa.Column("line", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["bisect_id"], ["bisects.id"], name=op.f("fk_findings_bisect_id_bisects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_findings")),
    )
    op.create_index("ix_findings_bisect_id_id", "findings", ["bisect_id", "id"])
    op.create_index("ix_findings_name_file", "findings", ["name", "file"])
    with op.batch_alter_table("steps") as batch:
        batch.add_column(sa.Column("purpose", ENUM, nullable=False, server_default="search"))


def downgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.drop_column("purpose")
    op.drop_index("ix_findings_name_file", table_name="findings")
    op.drop_index("ix_findings_bisect_id_id", table_name="findings")
    op.drop_table("findings")
