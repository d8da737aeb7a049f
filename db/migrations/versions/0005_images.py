"""images: worker images per node; steps.image: the image a step ran on

Revision ID: 0005_images
Revises: 0004_dashboard
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_images"
down_revision: str | Sequence[str] | None = "0004_dashboard"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)  # a frozen copy of db/schema.py's UTCDateTime at this revision


def upgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.add_column(sa.Column("image", sa.Text(), nullable=True))
    op.create_table(
        "images",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("sha", sa.String(64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("build_s", sa.Float(), nullable=False),
        sa.Column("created", UTC_DATETIME, nullable=False),
        sa.Column("last_used", UTC_DATETIME, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("log_tail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", "node", name="pk_images"),
    )
    op.create_index("ix_images_last_used", "images", ["last_used"])


def downgrade() -> None:
    op.drop_index("ix_images_last_used", table_name="images")
    op.drop_table("images")
    with op.batch_alter_table("steps") as batch:
        batch.drop_column("image")
