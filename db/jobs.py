"""The job queue of `bisect serve`: which submitted bisects wait, run, or are done, and in which order.

A job is a bisect (same id) that a server took on: stored queued when submitted, running once a coordinator
works on it, done when its coordinator returned. A restarted server resumes the running ones and starts the
queued ones (bisector/service/scheduler.py). The SQL of the jobs table lives here and runs in the Store's
transactions (`Store.reading()`, `Store.writing()`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from sqlalchemy import Row, func, select, update
from sqlalchemy.exc import IntegrityError

from bisector.db.bisect_table import status_update
from bisector.db.rows import load
from bisector.db.schema import bisects, jobs
from bisector.db.store import Store
from bisector.vocab.domain import BisectStatus
from bisector.vocab.errors import StateError, StoreError, UnknownBisectError

SOURCE_KEY = "source"  # a bisect a server stored carries its request's repository under this key of `extra`
OWNER_KEY = "owner"  # ... and who submitted it under this one
SUBMISSION_KEY = "submission_key"  # ... and the key its client sent, if any


class JobState(StrEnum):
    QUEUED = "queued"  # stored, waiting for a slot of the server's pool
    RUNNING = "running"  # a coordinator of the server works on it (or did, if the server died)
    DONE = "done"  # its coordinator returned, or it was cancelled while queued; the bisect's status says how

    def is_open(self) -> bool:
        return self is not JobState.DONE


@dataclass(frozen=True)
class JobRecord:
    bisect_id: int
    state: JobState
    priority: int
    submitted: datetime
    started: datetime | None  # when a server first took it up
    finished: datetime | None
    source: str  # the repository as the client named it
    owner: str | None  # who submitted it (its token's name); None for a job stored before jobs had owners
    submission_key: str | None  # its client's key for the submission; None: none sent


@dataclass
class Stranded:
    """What a server's start did with the bisects a server stored but never queued."""

    queued: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)  # duplicates of a job with their submission key


def duplicate_of(bisect_id: int) -> str:
    """The message of a bisect cancelled as a duplicate of the job that holds its submission key."""
    return f"a duplicate of job {bisect_id}: its submission key was that job's already"


class JobQueue:
    """The jobs table over one store. Every call is one transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def add(
        self,
        bisect_id: int,
        priority: int,
        source: str,
        submitted: datetime,
        owner: str,
        submission_key: str | None = None,
    ) -> JobRecord | None:
        """Queue the bisect: None. When this owner's submission key is another job's already (another server took the
        same submission at once), nothing is stored and that job is returned."""
        try:
            with self.store.writing() as conn:
                conn.execute(
                    jobs.insert().values(
                        bisect_id=bisect_id, state=JobState.QUEUED.value, priority=priority, submitted=submitted,
                        source=source, owner=owner, submission_key=submission_key,
                    )
                )  # fmt: skip
        except StoreError as exc:
            if submission_key is None or not isinstance(exc.__cause__, IntegrityError):
                raise
            if (holder := self.submitted_as(owner, submission_key)) is None:
                raise
            return holder
        return None

    def submitted_as(self, owner: str, submission_key: str) -> JobRecord | None:
        """The job this owner submitted with this key, if any."""
        query = select(jobs).where(jobs.c.owner == owner, jobs.c.submission_key == submission_key)
        with self.store.reading() as conn:
            row = conn.execute(query).first()
        return None if row is None else _record(row)

    def queue_stranded(self, now: datetime) -> Stranded:
        """Queue the bisects a server stored but never queued (it died between the two): running, stored with a
        source in `extra` (with the bisect, in one transaction), no job. Each is queued as submitted when it was
        created, with its stored priority, owner and submission key; one whose key another job of that owner holds
        (two servers given one submission at once) is that job's duplicate, and is cancelled instead. One
        transaction; the ids of each, oldest first."""
        query = (
            select(bisects.c.id, bisects.c.extra, bisects.c.created)
            .outerjoin(jobs, jobs.c.bisect_id == bisects.c.id)
            .where(jobs.c.bisect_id.is_(None), bisects.c.status == BisectStatus.RUNNING.value)
            .order_by(bisects.c.id)
        )
        stranded = Stranded()
        with self.store.writing() as conn:
            for row in conn.execute(query).all():
                extra = load(row.extra)
                if not isinstance(extra, dict) or not isinstance(extra.get(SOURCE_KEY), str):
                    continue  # not a server's: a local `bisect run` left running
                priority, owner, key = extra.get("priority"), extra.get(OWNER_KEY), extra.get(SUBMISSION_KEY)
                owner, key = (owner if isinstance(owner, str) else None), (key if isinstance(key, str) else None)
                if key is not None and owner is not None:
                    taken = select(jobs.c.bisect_id).where(jobs.c.owner == owner, jobs.c.submission_key == key)
                    if (holder := conn.execute(taken).scalar()) is not None:
                        message = duplicate_of(holder)
                        conn.execute(status_update(row.id, BisectStatus.CANCELLED, now, None, None, message))
                        stranded.cancelled.append(row.id)
                        continue
                conn.execute(
                    jobs.insert().values(
                        bisect_id=row.id, state=JobState.QUEUED.value, submitted=row.created,
                        priority=priority if isinstance(priority, int) else 0, source=extra[SOURCE_KEY],
                        owner=owner, submission_key=key,
                    )
                )  # fmt: skip
                stranded.queued.append(row.id)
        return stranded

    def get(self, bisect_id: int) -> JobRecord:
        with self.store.reading() as conn:
            row = conn.execute(select(jobs).where(jobs.c.bisect_id == bisect_id)).first()
        if row is None:
            raise UnknownBisectError(f"no job with id {bisect_id} in {self.store.url}")
        return _record(row)

    def open_jobs(self) -> list[JobRecord]:
        """Running and queued jobs: running first, then by priority (highest first), then oldest first."""
        open_states = [state.value for state in JobState if state.is_open()]
        query = (
            select(jobs)
            .where(jobs.c.state.in_(open_states))
            .order_by(jobs.c.state.desc(), jobs.c.priority.desc(), jobs.c.submitted, jobs.c.bisect_id)
        )  # "running" sorts after "queued": desc puts it first
        with self.store.reading() as conn:
            return [_record(row) for row in conn.execute(query)]

    def waiting(self, bisect_id: int) -> int | None:
        """How many queued jobs start before this one while it waits for a slot; None when it does not wait (no
        server queued it, a coordinator took it, or its bisect ended)."""
        open_jobs = self.open_jobs()
        position = next((i for i, job in enumerate(open_jobs) if job.bisect_id == bisect_id), None)
        if position is None or open_jobs[position].state is not JobState.QUEUED:
            return None
        with self.store.reading() as conn:
            status = conn.execute(select(bisects.c.status).where(bisects.c.id == bisect_id)).scalar()
        if status is None or BisectStatus(status).is_terminal():
            return None
        return sum(1 for job in open_jobs[:position] if job.state is JobState.QUEUED)

    def mark_running(self, bisect_id: int, now: datetime) -> None:
        """queued -> running (a running job stays running: a restarted server resumes it). `started` is the first
        start: a restarted server, or a job queued again, keeps it."""
        with self.store.writing() as conn:
            changed = conn.execute(
                update(jobs)
                .where(jobs.c.bisect_id == bisect_id, jobs.c.state.in_([JobState.QUEUED.value, JobState.RUNNING.value]))
                .values(state=JobState.RUNNING.value, started=func.coalesce(jobs.c.started, now))
            ).rowcount
        if not changed:
            raise StateError(f"job {bisect_id} is not open")

    def requeue(self, bisect_id: int) -> bool:
        """done -> queued, for a bisect reopened after its job ended (a mark that changed its answer); whether it
        was done."""
        with self.store.writing() as conn:
            return bool(
                conn.execute(
                    update(jobs)
                    .where(jobs.c.bisect_id == bisect_id, jobs.c.state == JobState.DONE.value)
                    .values(state=JobState.QUEUED.value, finished=None)
                ).rowcount
            )

    def mark_done(self, bisect_id: int, now: datetime) -> bool:
        """Whether the job was open (a done job stays done)."""
        with self.store.writing() as conn:
            return bool(
                conn.execute(
                    update(jobs)
                    .where(jobs.c.bisect_id == bisect_id, jobs.c.state != JobState.DONE.value)
                    .values(state=JobState.DONE.value, finished=now)
                ).rowcount
            )


def _record(row: Row[object]) -> JobRecord:
    return JobRecord(
        bisect_id=row.bisect_id, state=JobState(row.state), priority=row.priority, submitted=row.submitted,
        started=row.started, finished=row.finished, source=row.source, owner=row.owner,
        submission_key=row.submission_key,
    )  # fmt: skip
