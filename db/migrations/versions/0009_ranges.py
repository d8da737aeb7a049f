"""ranges: a bisect's candidates as SHAs by position (one text row per run of them stored at once); candidates then
holds only the described ones, with their details (every candidate of a bisect stored before this revision)

Revision ID: 0009_ranges
Revises: 0008_gpus_per_step
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_ranges"
down_revision: str | Sequence[str] | None = "0008_gpus_per_step"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)  # a frozen copy of db/schema.py's UTCDateTime at this revision

candidates = sa.table(
    "candidates",
    sa.column("bisect_id", sa.Integer()),
    sa.column("position", sa.Integer()),
    sa.column("sha", sa.String(64)),
    sa.column("subject", sa.Text()),
    sa.column("author", sa.Text()),
    sa.column("date", UTC_DATETIME),
    sa.column("pr", sa.Integer()),
)
ranges = sa.table(
    "ranges",
    sa.column("bisect_id", sa.Integer()),
    sa.column("first_position", sa.Integer()),
    sa.column("shas", sa.Text()),
)


def upgrade() -> None:
    op.create_table(
        "ranges",
        sa.Column("bisect_id", sa.Integer(), nullable=False),
        sa.Column("first_position", sa.Integer(), nullable=False),
        sa.Column("shas", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["bisect_id"], ["bisects.id"], name="fk_ranges_bisect_id_bisects", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("bisect_id", "first_position", name="pk_ranges"),
    )
    connection = op.get_bind()
    bisect_ids = connection.execute(sa.select(candidates.c.bisect_id).distinct()).scalars().all()
    for bisect_id in bisect_ids:
        listed = sa.select(candidates.c.position, candidates.c.sha).where(candidates.c.bisect_id == bisect_id)
        chunks: list[tuple[int, list[str]]] = []  # (first position, SHAs)
        for position, sha in connection.execute(listed.order_by(candidates.c.position)):
            if chunks and position == chunks[-1][0] + len(chunks[-1][1]):
                chunks[-1][1].append(sha)
            else:  # every bisect's positions run 0, 1, 2, ...; a gap would start a row of its own
                chunks.append((position, [sha]))
        rows = [{"bisect_id": bisect_id, "first_position": p, "shas": "\n".join(shas)} for p, shas in chunks]
        connection.execute(ranges.insert(), rows)


def downgrade() -> None:
    """Candidates that were never described come back with empty details, dated when their bisect was created."""
    connection = op.get_bind()
    bisects = sa.table("bisects", sa.column("id", sa.Integer()), sa.column("created", UTC_DATETIME))
    chunks = sa.select(ranges.c.bisect_id, ranges.c.first_position, ranges.c.shas, bisects.c.created).join(
        bisects, bisects.c.id == ranges.c.bisect_id
    )
    for bisect_id, first_position, shas, created in connection.execute(chunks).all():
        stored = sa.select(candidates.c.position).where(candidates.c.bisect_id == bisect_id)
        described = set(connection.execute(stored).scalars())
        rows = [
            {"bisect_id": bisect_id, "position": position, "sha": sha, "subject": "", "author": "", "date": created,
             "pr": None}
            for position, sha in enumerate(shas.split("\n"), start=first_position)
            if position not in described
        ]  # fmt: skip
        if rows:
            connection.execute(candidates.insert(), rows)
    op.drop_table("ranges")
