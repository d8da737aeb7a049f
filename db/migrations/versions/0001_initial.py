"""initial schema: bisects, candidates, steps

Revision ID: 0001
Revises:
Create Date: 2025-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types of db/schema.py at this revision (UTCDateTime is a DateTime).
SHA = sa.String(64)
ENUM = sa.String(32)
UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "bisects",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("repo", sa.Text(), nullable=False),
        sa.Column("good", SHA, nullable=False),
        sa.Column("bad", SHA, nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("status", ENUM, nullable=False),
        sa.Column("created", UTC_DATETIME, nullable=False),
        sa.Column("finished", UTC_DATETIME, nullable=True),
        sa.Column("first_bad", SHA, nullable=True),
        sa.Column("last_good", SHA, nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("extra", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_bisects"),
    )
    op.create_index("ix_bisects_created", "bisects", ["created"])
    op.create_index("ix_bisects_status_created", "bisects", ["status", "created"])
    op.create_index("ix_bisects_repo_created", "bisects", ["repo", "created"])
    op.create_index("ix_bisects_first_bad", "bisects", ["first_bad"])

    op.create_table(
        "candidates",
        sa.Column("bisect_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("sha", SHA, nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("author", sa.Text(), nullable=False),
        sa.Column("date", UTC_DATETIME, nullable=False),
        sa.Column("pr", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["bisect_id"], ["bisects.id"], name="fk_candidates_bisect_id_bisects", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("bisect_id", "position", name="pk_candidates"),
    )
    op.create_index("ix_candidates_sha", "candidates", ["sha"])
    op.create_index("ix_candidates_pr", "candidates", ["pr"])

    op.create_table(
        "steps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("bisect_id", sa.Integer(), nullable=False),
        sa.Column("sha", SHA, nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("gpus", sa.Text(), nullable=False),
        sa.Column("started", UTC_DATETIME, nullable=False),
        sa.Column("finished", UTC_DATETIME, nullable=True),
        sa.Column("build_s", sa.Float(), nullable=True),
        sa.Column("run_s", sa.Float(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("verdict", ENUM, nullable=True),
        sa.Column("samples", sa.Text(), nullable=False),
        sa.Column("log_path", sa.Text(), nullable=False),
        sa.Column("error_kind", ENUM, nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["bisect_id"], ["bisects.id"], name="fk_steps_bisect_id_bisects", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_steps"),
    )
    op.create_index("ix_steps_bisect_id_id", "steps", ["bisect_id", "id"])
    op.create_index("ix_steps_bisect_id_verdict", "steps", ["bisect_id", "verdict"])
    op.create_index("ix_steps_sha", "steps", ["sha"])
    op.create_index("ix_steps_node_started", "steps", ["node", "started"])
    op.create_index("ix_steps_started", "steps", ["started"])


def downgrade() -> None:
    op.drop_table("steps")
    op.drop_table("candidates")
    op.drop_table("bisects")
