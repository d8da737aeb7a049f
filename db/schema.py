"""Every table of the result store, in one place.

Alembic migrations (db/migrations/versions/) must produce exactly this schema; tests/db compares them.
JSON columns are plain text: db/store.py encodes and decodes them. Datetimes are stored in UTC and come
back timezone-aware.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
)

# Named constraints keep Alembic batch migrations on SQLite (which recreate tables) predictable.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SHA = String(64)  # 40 hex digits for SHA-1 repositories, 64 for SHA-256 ones
ENUM = String(32)  # the value of a StrEnum from vocab.domain


class UTCDateTime(TypeDecorator[datetime]):
    """An aware datetime stored in UTC; SQLite keeps no offset, so read values are marked UTC again."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()}: the store needs timezone-aware ones")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = MetaData(naming_convention=NAMING_CONVENTION)

bisects = Table(
    "bisects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("repo", Text, nullable=False),
    Column("good", SHA, nullable=False),
    Column("bad", SHA, nullable=False),
    Column("spec", Text, nullable=False),  # JSON object: the BisectSpec
    Column("status", ENUM, nullable=False),  # BisectStatus
    Column("created", UTCDateTime, nullable=False),
    Column("finished", UTCDateTime, nullable=True),
    Column("first_bad", SHA, nullable=True),
    Column("last_good", SHA, nullable=True),
    Column("message", Text, nullable=False),
    Column("extra", Text, nullable=False),  # JSON object: confidence, analysis summaries, ...
    # The coordinator that owns the bisect (host:pid:process start), when it last said it is alive and how long
    # after that it is gone (its lease TTL); NULL when none does. A second coordinator is refused while the lease
    # is fresh by the holder's TTL, or by its own when the holder's is NULL (leases taken before migration 0011)
    # (bisector/runner/ownership.py).
    Column("owner", Text, nullable=True),
    Column("heartbeat", UTCDateTime, nullable=True),
    Column("lease_ttl_s", Float, nullable=True),
    Column("metric", Text, nullable=False, server_default=""),  # db.queries.metric_label(spec), for filters
    # GPU-seconds: the sum over its finished steps of vocab.cost.gpu_seconds, kept by db/step_table.py as steps
    # finish (statistics; migration 0007 recomputes it for older stores).
    Column("device_s", Float, nullable=False, server_default="0"),
    # The dashboard lists bisects newest first, optionally per status or per repository, and looks up
    # earlier bisects that blamed a given commit.
    Index("ix_bisects_created", "created"),
    Index("ix_bisects_status_created", "status", "created"),
    Index("ix_bisects_repo_created", "repo", "created"),
    Index("ix_bisects_first_bad", "first_bad"),
    # Statistics per repository and metric, read from the index alone.
    Index("ix_bisects_repo_metric", "repo", "metric", "status", "created", "finished", "device_s"),
)

# The candidates of each bisect (vocab/commit_range.py): their SHAs by position, newline-separated, one row per run
# of them stored at once (the range at creation, then each merged branch descended into).
ranges = Table(
    "ranges",
    metadata,
    Column("bisect_id", Integer, ForeignKey("bisects.id", ondelete="CASCADE"), primary_key=True),
    Column("first_position", Integer, primary_key=True),
    Column("shas", Text, nullable=False),
)

# The described candidates of each bisect, those it shows (its endpoints, tested commits, answer, suspects, the
# range's ends), with their details; the others are only in ranges. Stores made before migration 0008 describe all.
candidates = Table(
    "candidates",
    metadata,
    Column("bisect_id", Integer, ForeignKey("bisects.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("sha", SHA, nullable=False),
    Column("subject", Text, nullable=False),
    Column("author", Text, nullable=False),
    Column("date", UTCDateTime, nullable=False),
    Column("pr", Integer, nullable=True),
    # Which bisects showed a commit or a PR.
    Index("ix_candidates_sha", "sha"),
    Index("ix_candidates_pr", "pr"),
    # The first bad commit of each bisect (its author and PR) for lists and statistics.
    Index("ix_candidates_bisect_id_sha", "bisect_id", "sha", "author"),
)

steps = Table(
    "steps",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("bisect_id", Integer, ForeignKey("bisects.id", ondelete="CASCADE"), nullable=False),
    Column("sha", SHA, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("worker", Text, nullable=False),
    Column("node", Text, nullable=False),
    Column("gpus", Text, nullable=False),  # JSON list of GPU indices
    Column("started", UTCDateTime, nullable=False),
    Column("finished", UTCDateTime, nullable=True),
    Column("build_s", Float, nullable=True),
    Column("run_s", Float, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("verdict", ENUM, nullable=True),  # Verdict; NULL while the step runs
    Column("samples", Text, nullable=False),  # JSON list of floats
    Column("log_path", Text, nullable=False),
    Column("error_kind", ENUM, nullable=True),  # ErrorKind
    Column("detail", Text, nullable=False),
    Column("purpose", ENUM, nullable=False, server_default="search"),  # StepPurpose
    Column("image", Text, nullable=True),  # JSON: ImageInfo.summary() of the worker image it ran on; NULL: none
    # The steps of one bisect in order, its running steps (verdict NULL), every test of one commit,
    # and per-node / over-time statistics (flaky nodes, error rates, build and run times).
    Index("ix_steps_bisect_id_id", "bisect_id", "id"),
    Index("ix_steps_bisect_id_verdict", "bisect_id", "verdict"),
    Index("ix_steps_sha", "sha"),
    Index("ix_steps_node_started", "node", "started"),
    Index("ix_steps_started", "started"),
)

findings = Table(
    "findings",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("bisect_id", Integer, ForeignKey("bisects.id", ondelete="CASCADE"), nullable=False),
    Column("kind", ENUM, nullable=False),  # bisector.analysis.FindingKind
    Column("file", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("before", Text, nullable=True),  # NULL: the row is absent on that side
    Column("after", Text, nullable=True),
    Column("line", Integer, nullable=True),
    Column("detail", Text, nullable=False),
    # A bisect's explanation in order, and across bisects: which ones changed a given table or file.
    Index("ix_findings_bisect_id_id", "bisect_id", "id"),
    Index("ix_findings_name_file", "name", "file"),
    # Frequent culprit files and tables per repository and metric, read from the index alone.
    Index("ix_findings_bisect_id_kind", "bisect_id", "kind", "file", "name"),
)

# Worker images (workers/images) as the steps that built or used them reported them: one row per image and node.
images = Table(
    "images",
    metadata,
    Column("id", String(32), primary_key=True),  # ImageKey.id
    Column("node", Text, primary_key=True),  # the host whose cache root holds it
    Column("key", Text, nullable=False),  # JSON: the ImageKey
    Column("sha", SHA, nullable=False),  # the commit it was built at
    Column("path", Text, nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Column("source", ENUM, nullable=False),  # built | artifact | copied (db/images.py MADE_AS)
    Column("build_s", Float, nullable=False),
    Column("created", UTCDateTime, nullable=False),
    Column("last_used", UTCDateTime, nullable=False),
    Column("status", ENUM, nullable=False),  # workers.images.cache.ImageStatus
    Column("log_tail", Text, nullable=False),  # a failed build's output's end
    Index("ix_images_last_used", "last_used"),
)

# Jobs of `bisect serve` (db/jobs.py): one row per submitted bisect, so that a restarted server resumes the
# running ones and starts the queued ones.
jobs = Table(
    "jobs",
    metadata,
    Column("bisect_id", Integer, ForeignKey("bisects.id", ondelete="CASCADE"), primary_key=True),
    Column("state", ENUM, nullable=False),  # db.jobs.JobState
    Column("priority", Integer, nullable=False),  # higher starts first and gets a larger share of the slots
    Column("submitted", UTCDateTime, nullable=False),
    Column("started", UTCDateTime, nullable=True),
    Column("finished", UTCDateTime, nullable=True),
    Column("source", Text, nullable=False),  # the repository as the client named it (the bisect's repo is a mirror)
    Column("owner", Text, nullable=True),  # who submitted it (the name of its token); None: stored before owners
    # The client's key for its submission (Idempotency-Key): its retries get this job, never a second one. None: none
    # sent (identical submissions without a key are separate jobs).
    Column("submission_key", Text, nullable=True),
    # The scheduler's queue: open jobs by state, priority and age.
    Index("ix_jobs_state_priority", "state", "priority", "submitted"),
    Index("ux_jobs_owner_submission_key", "owner", "submission_key", unique=True),
)
