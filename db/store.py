"""The result store: the only code that speaks SQL. Rows become vocab.domain objects here.

Every write is its own transaction, committed before the method returns: the coordinator may be killed
at any moment, and `bisect resume` continues from what is stored. Errors of the database come out as
StoreError (one line naming the URL); misuse of the API (naive datetimes, values that are not JSON)
raises ValueError / TypeError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from sqlalchemy import Connection, CursorResult, Engine, Row, Update, delete, exists, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError, StatementError
from sqlalchemy.pool import StaticPool

from db.engine import WRITE_OPTIONS, db_url, default_db_url, make_engine, make_read_only_engine, mask_url
from db.images import delete_images, list_images, record_images
from db.migrate import at_head, upgrade
from db.queries import add_device_seconds, metric_label
from db.schema import bisects, candidates, findings, steps
from vocab.domain import (
    BisectRecord,
    BisectStatus,
    Commit,
    ErrorKind,
    ImageInfo,
    StepPurpose,
    StepRecord,
    StepResult,
    Verdict,
)
from vocab.errors import StateError, StoreError, UnknownBisectError

INTERRUPTED_DETAIL = "coordinator stopped while the step ran"
_OPEN_STATUSES = [status.value for status in BisectStatus if not status.is_terminal()]
LeaseHolder = tuple[str, datetime | None]  # (owner, its last heartbeat)


@dataclass(frozen=True)
class NewStep:
    """A step about to start, as Store.start_steps records it."""

    sha: str
    attempt: int
    worker: str
    started: datetime
    purpose: StepPurpose = StepPurpose.SEARCH
    node: str = ""
    gpus: tuple[int, ...] = ()


class Store:
    """Bisects, their candidate commits and their steps, in any SQLAlchemy database."""

    def __init__(self, engine: Engine, url: str) -> None:
        """Use Store.open: it migrates the database first."""
        self._engine = engine
        # SQLite write transactions take the write lock at BEGIN, so a read-then-write cannot hit
        # SQLITE_BUSY halfway; other backends ignore the option.
        self._writer = engine.execution_options(**WRITE_OPTIONS)
        self._url = url
        self._closed = False

    @classmethod
    def open(cls, url: str | None = None, *, read_only: bool = False) -> Store:
        """Open (creating and migrating) the store at url, default_db_url() when None (a URL or a file path).

        read_only: for commands that only read (list, report, status, log). A store already at the newest schema
        is opened without a single write, so a read-only file or directory serves them; one that needs migrating
        (or does not exist yet) is opened as usual.
        """
        url = db_url(default_db_url() if url is None else url)
        masked = mask_url(url)
        engine: Engine | None = None
        try:
            if read_only:
                engine = make_read_only_engine(url)
                if engine is not None and at_head(engine):
                    return cls(engine, masked)
                if engine is not None:
                    engine.dispose()
            engine = make_engine(url)
            upgrade(engine)
            store = cls(engine, masked)
            store._check_writable()
        # Any failure here (a bad URL, a missing driver, an unwritable file, a broken migration) is
        # something the operator must fix: one line, with the cause chained for debugging.
        except Exception as exc:
            if engine is not None:
                engine.dispose()
            cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ else exc
            raise StoreError(f"cannot open the store {masked}: {_describe(cause)}") from exc
        return store

    @property
    def url(self) -> str:
        """The database URL, password masked."""
        return self._url

    @property
    def identity(self) -> str:
        """Names this database and no other, whatever URL reached it (a SQLite file by its resolved path):
        what two stores that share a data directory keep their step logs apart by."""
        url = self._engine.url
        if self.is_private:
            return f"sqlite-memory:{id(self)}"
        if url.get_backend_name() == "sqlite":
            return f"sqlite:{Path(url.database or '').resolve()}"
        return url.render_as_string(hide_password=True)

    @property
    def is_private(self) -> bool:
        """An in-memory database: one process sees it, so nobody else can own or cancel its bisects."""
        return isinstance(self._engine.pool, StaticPool)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self._url!r})"

    # --- bisects -----------------------------------------------------------------------------------

    def create_bisect(self, repo: str, good: str, bad: str, spec: dict[str, object], created: datetime) -> int:
        values = {
            "repo": repo,
            "good": good,
            "bad": bad,
            "spec": _dump(spec),
            "status": BisectStatus.RUNNING.value,
            "created": _aware(created),
            "message": "",
            "extra": _dump({}),
            "metric": metric_label(spec),
        }
        with self._write() as conn:
            return _inserted_id(conn.execute(insert(bisects).values(values)))

    def get_bisect(self, bisect_id: int) -> BisectRecord:
        with self._read() as conn:
            row = conn.execute(select(bisects).where(bisects.c.id == bisect_id)).one_or_none()
        if row is None:
            raise self._unknown(bisect_id)
        return _bisect_record(row)

    def list_bisects(self, limit: int = 50) -> list[BisectRecord]:
        """The newest `limit` bisects, newest first."""
        query = select(bisects).order_by(bisects.c.created.desc(), bisects.c.id.desc()).limit(limit)
        with self._read() as conn:
            return [_bisect_record(row) for row in conn.execute(query)]

    def set_status(
        self,
        bisect_id: int,
        status: BisectStatus,
        *,
        finished: datetime | None = None,
        first_bad: str | None = None,
        last_good: str | None = None,
        message: str | None = None,
    ) -> None:
        """Move a running (or paused) bisect to status; the other fields change only when given.

        A bisect in a terminal status never changes again (StateError), not even to the same status.
        """
        values: dict[str, object] = {"status": BisectStatus(status).value}
        if finished is not None:
            values["finished"] = _aware(finished)
        if first_bad is not None:
            values["first_bad"] = first_bad
        if last_good is not None:
            values["last_good"] = last_good
        if message is not None:
            values["message"] = message
        # The guard is in the WHERE clause, so two processes cannot both leave the open statuses.
        guarded = update(bisects).where(bisects.c.id == bisect_id, bisects.c.status.in_(_OPEN_STATUSES)).values(values)
        self._change_status(
            bisect_id,
            guarded,
            lambda current: f"bisect {bisect_id} is already {current}; it cannot become {status.value}",
        )

    def reopen(self, bisect_id: int, was: BisectStatus, message: str) -> None:
        """Set a finished bisect back to running (a person's verdict changed its answer; `bisect resume` continues).
        Guarded like set_status: only from status `was`, so two processes cannot both reopen it."""
        guarded = (
            update(bisects)
            .where(bisects.c.id == bisect_id, bisects.c.status == BisectStatus(was).value)
            .values(status=BisectStatus.RUNNING.value, finished=None, first_bad=None, last_good=None, message=message)
        )
        self._change_status(
            bisect_id,
            guarded,
            lambda current: f"bisect {bisect_id} is {current} now, not {was.value}; it was not reopened",
        )

    def _change_status(self, bisect_id: int, guarded: Update, refusal: Callable[[str], str]) -> None:
        """Run a status change whose WHERE clause holds its guard; StateError(refusal(current status)) when the
        guard did not hold, UnknownBisectError when there is no such bisect."""
        with self._write() as conn:
            if conn.execute(guarded).rowcount == 1:
                return
            current = conn.execute(select(bisects.c.status).where(bisects.c.id == bisect_id)).scalar()
        if current is None:
            raise self._unknown(bisect_id)
        raise StateError(refusal(current))

    def update_extra(self, bisect_id: int, **values: object) -> None:
        """Merge values (JSON-able) into the bisect's `extra` object."""
        _dump(values)  # a TypeError for a value that is not JSON-able, before touching the database
        with self._write() as conn:
            current = conn.execute(select(bisects.c.extra).where(bisects.c.id == bisect_id).with_for_update()).scalar()
            if current is None:
                raise self._unknown(bisect_id)
            merged = {**_load(current), **values}
            conn.execute(update(bisects).where(bisects.c.id == bisect_id).values(extra=_dump(merged)))

    # --- ownership -----------------------------------------------------------------------------------

    def claim_lease(
        self, bisect_id: int, owner: str, now: datetime, may_replace: Callable[[str, datetime | None], bool]
    ) -> LeaseHolder | None:
        """Make owner the bisect's owner if nobody holds it, owner holds it already, or may_replace(holder, its
        heartbeat) says the holder is gone. None when claimed, else the holder, who keeps it. Read and write
        are one transaction under the write lock, so two claimants cannot both win."""
        with self._write() as conn:
            row = conn.execute(
                select(bisects.c.owner, bisects.c.heartbeat).where(bisects.c.id == bisect_id).with_for_update()
            ).one_or_none()
            if row is None:
                raise self._unknown(bisect_id)
            if row.owner not in (None, owner) and not may_replace(row.owner, row.heartbeat):
                return row.owner, row.heartbeat
            conn.execute(update(bisects).where(bisects.c.id == bisect_id).values(owner=owner, heartbeat=_aware(now)))
        return None

    def renew_lease(self, bisect_id: int, owner: str, now: datetime) -> bool:
        """Record that owner is alive; False when it no longer holds the lease (another coordinator took it)."""
        query = update(bisects).where(bisects.c.id == bisect_id, bisects.c.owner == owner).values(heartbeat=_aware(now))
        with self._write() as conn:
            return bool(conn.execute(query).rowcount == 1)

    def release_lease(self, bisect_id: int, owner: str) -> None:
        """Give the lease up, if owner still holds it."""
        query = (
            update(bisects)
            .where(bisects.c.id == bisect_id, bisects.c.owner == owner)
            .values(owner=None, heartbeat=None)
        )
        with self._write() as conn:
            conn.execute(query)

    # --- candidates --------------------------------------------------------------------------------

    def add_candidates(self, bisect_id: int, commits: Sequence[Commit]) -> None:
        """Store the candidate commits of a bisect, all in one transaction."""
        rows = [
            {
                "bisect_id": bisect_id,
                "position": commit.position,
                "sha": commit.sha,
                "subject": commit.subject,
                "author": commit.author,
                "date": _aware(commit.date),
                "pr": commit.pr,
            }
            for commit in commits
        ]
        with self._write() as conn:
            self._require_bisect(conn, bisect_id)
            if rows:
                conn.execute(insert(candidates), rows)  # executemany: one statement, many rows

    def candidates(self, bisect_id: int) -> list[Commit]:
        """The candidates of a bisect, by position."""
        query = select(candidates).where(candidates.c.bisect_id == bisect_id).order_by(candidates.c.position)
        with self._read() as conn:
            commits = [
                Commit(
                    position=row.position,
                    sha=row.sha,
                    subject=row.subject,
                    author=row.author,
                    date=row.date,
                    pr=row.pr,
                )
                for row in conn.execute(query)
            ]
            if not commits:
                self._require_bisect(conn, bisect_id)
        return commits

    # --- steps -------------------------------------------------------------------------------------

    def start_step(
        self,
        bisect_id: int,
        sha: str,
        attempt: int,
        worker: str,
        node: str,
        gpus: tuple[int, ...],
        started: datetime,
        purpose: StepPurpose = StepPurpose.SEARCH,
    ) -> int:
        """Record a step that starts now (verdict NULL until finish_step); returns its id."""
        return self.start_steps(bisect_id, [NewStep(sha, attempt, worker, started, purpose, node, gpus)])[0]

    def start_steps(self, bisect_id: int, new_steps: Sequence[NewStep]) -> list[int]:
        """Record steps that start now, in one transaction (a round's probes go out together); their ids in order."""
        rows = [
            {
                "bisect_id": bisect_id,
                "sha": step.sha,
                "attempt": step.attempt,
                "worker": _text(step.worker),
                "node": _text(step.node),
                "gpus": _dump(list(step.gpus)),
                "started": _aware(step.started),
                "samples": _dump([]),
                "log_path": "",
                "detail": "",
                "purpose": StepPurpose(step.purpose).value,
            }
            for step in new_steps
        ]
        # No existence check first: the foreign key refuses a step of an unknown bisect, and the check cost more
        # than the insert on the coordinator's per-step path.
        try:
            with self._write() as conn:
                return [_inserted_id(conn.execute(insert(steps), values)) for values in rows]
        except StoreError as exc:
            if _foreign_key_violation(exc.__cause__):
                raise self._unknown(bisect_id) from None
            raise

    def finish_step(self, step_id: int, result: StepResult, finished: datetime) -> None:
        """Write the result of a running step. A step that has a verdict already is left alone (StateError)."""
        self.finish_steps([(step_id, result, finished)])

    def finish_steps(self, results: Sequence[tuple[int, StepResult, datetime]]) -> None:
        """Write the results of running steps in one transaction (each as finish_step would). A step that has a
        verdict already is left alone; the others are written, then the first such refusal is raised."""
        for step_id, result, _ in results:
            if result.step_id != step_id:
                raise ValueError(f"result of step {result.step_id} given for step {step_id}")
        refused: list[StateError | StoreError] = []
        with self._write() as conn:
            for step_id, result, finished in results:
                guarded = update(steps).where(steps.c.id == step_id, steps.c.verdict.is_(None))
                if conn.execute(guarded.values(_result_values(result, finished))).rowcount == 1:
                    conn.execute(add_device_seconds(step_id))
                    if result.image is not None:
                        record_images(conn, [result.image])
                    continue
                row = conn.execute(select(steps.c.sha, steps.c.verdict).where(steps.c.id == step_id)).one_or_none()
                if row is None:
                    refused.append(StoreError(f"no step with id {step_id} in {self._url}"))
                else:
                    refused.append(StateError(f"step {step_id} ({row.sha[:12]}) already has the verdict {row.verdict}"))
        if refused:
            raise refused[0]

    def steps(self, bisect_id: int) -> list[StepRecord]:
        """Every step of a bisect, by id (the order they started in)."""
        query = select(steps).where(steps.c.bisect_id == bisect_id).order_by(steps.c.id)
        with self._read() as conn:
            records = [_step_record(row) for row in conn.execute(query)]
            if not records:
                self._require_bisect(conn, bisect_id)
        return records

    def add_manual_step(self, bisect_id: int, sha: str, verdict: Verdict, detail: str, when: datetime) -> int:
        """Store a person's verdict on a commit (`bisect mark`, `bisect replay`): a finished step of purpose
        manual that ran nothing; detail says who gave it and why. Returns its id."""
        if verdict not in (Verdict.GOOD, Verdict.BAD, Verdict.SKIP):
            raise ValueError(f"a manual verdict is good, bad or skip, not {verdict.value}")
        with self._write() as conn:
            self._require_bisect(conn, bisect_id)
            attempt = conn.execute(
                select(func.count()).select_from(steps).where(steps.c.bisect_id == bisect_id, steps.c.sha == sha)
            ).scalar_one()
            values = {
                "bisect_id": bisect_id, "sha": sha, "attempt": int(attempt) + 1, "worker": "", "node": "",
                "gpus": _dump([]), "started": _aware(when), "finished": _aware(when), "verdict": Verdict(verdict).value,
                "samples": _dump([]), "log_path": "", "detail": detail, "purpose": StepPurpose.MANUAL.value,
            }  # fmt: skip
            return _inserted_id(conn.execute(insert(steps).values(values)))

    def manual_steps(self, bisect_id: int, after_id: int = 0) -> list[StepRecord]:
        """The manual steps of a bisect stored after step after_id, by id (a running coordinator takes them in)."""
        query = (
            select(steps)
            .where(steps.c.bisect_id == bisect_id, steps.c.purpose == StepPurpose.MANUAL.value, steps.c.id > after_id)
            .order_by(steps.c.id)
        )
        with self._read() as conn:
            return [_step_record(row) for row in conn.execute(query)]

    def interrupt_running_steps(self, bisect_id: int, finished: datetime) -> int:
        """Mark every running step of a bisect as an interrupted error; returns how many there were."""
        query = (
            update(steps)
            .where(steps.c.bisect_id == bisect_id, steps.c.verdict.is_(None))
            .values(
                verdict=Verdict.ERROR.value,
                error_kind=ErrorKind.INTERRUPTED.value,
                detail=INTERRUPTED_DETAIL,
                finished=_aware(finished),
            )
        )
        with self._write() as conn:
            self._require_bisect(conn, bisect_id)
            count = conn.execute(query).rowcount
        return int(count)

    # --- findings ----------------------------------------------------------------------------------

    def replace_findings(self, bisect_id: int, kinds: Iterable[str], rows: Sequence[Mapping[str, object]]) -> None:
        """Replace a bisect's findings of the given kinds by rows (dicts as Finding.to_json makes them)."""
        kinds = list(kinds)
        values = [
            {
                "bisect_id": bisect_id,
                "kind": str(row["kind"]),
                "file": str(row.get("file") or ""),
                "name": str(row.get("name") or ""),
                "key": str(row.get("key") or ""),
                "before": None if row.get("before") is None else str(row["before"]),
                "after": None if row.get("after") is None else str(row["after"]),
                "line": row.get("line") if isinstance(row.get("line"), int) else None,
                "detail": str(row.get("detail") or ""),
            }
            for row in rows
        ]
        with self._write() as conn:
            self._require_bisect(conn, bisect_id)
            conn.execute(delete(findings).where(findings.c.bisect_id == bisect_id, findings.c.kind.in_(kinds)))
            if values:
                conn.execute(insert(findings), values)

    def findings(self, bisect_id: int) -> list[dict[str, object]]:
        """A bisect's findings in the order they were stored, as dicts (Finding.from_json reads them)."""
        query = select(findings).where(findings.c.bisect_id == bisect_id).order_by(findings.c.id)
        with self._read() as conn:
            return [
                {k: row._mapping[k] for k in ("kind", "file", "name", "key", "before", "after", "line", "detail")}
                for row in conn.execute(query)
            ]

    # --- plumbing ----------------------------------------------------------------------------------

    def reading(self) -> AbstractContextManager[Connection]:
        """A read transaction for the read-only queries of db/queries.py; errors become StoreErrors."""
        return self._read()

    def writing(self) -> AbstractContextManager[Connection]:
        """A write transaction for the SQL of a table kept beside the store's own (db/jobs.py); errors become
        StoreErrors."""
        return self._write()

    # --- worker images (db/images.py holds their SQL) ---------------------------------------------------------

    def images(self, node: str | None = None) -> list[ImageInfo]:
        """The images steps reported (of one node, or all), most recently used first."""
        with self._read() as conn:
            return list_images(conn, node)

    def forget_images(self, node: str, ids: Sequence[str]) -> int:
        """Drop the rows of images removed from a node's cache root; how many there were."""
        with self._write() as conn:
            return delete_images(conn, node, ids)

    # --- end of worker images ----------------------------------------------------------------------------------

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._transaction(self._engine) as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._transaction(self._writer) as conn:
            yield conn

    @contextmanager
    def _transaction(self, engine: Engine) -> Iterator[Connection]:
        """One transaction, committed on success; database errors become one-line StoreErrors."""
        if self._closed:
            raise StoreError(f"the store {self._url} is closed")
        try:
            with engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StoreError(f"store {self._url}: {_describe(exc)}") from exc

    def _check_writable(self) -> None:
        """Fail at open, not at the first result, when the database can be read but not written."""
        with self._write() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = version_num"))

    def _require_bisect(self, conn: Connection, bisect_id: int) -> None:
        if not conn.execute(select(exists().where(bisects.c.id == bisect_id))).scalar():
            raise self._unknown(bisect_id)

    def _unknown(self, bisect_id: int) -> UnknownBisectError:
        return UnknownBisectError(f"no bisect with id {bisect_id} in {self._url}")


def _describe(exc: BaseException) -> str:
    """The cause of exc on one line, without SQLAlchemy's SQL echo and background links."""
    cause: BaseException = exc
    if isinstance(exc, StatementError) and exc.orig is not None:
        cause = exc.orig
    if isinstance(cause, OSError) and cause.strerror:
        message = f"{cause.strerror}: {cause.filename}" if cause.filename else cause.strerror
    else:
        message = str(cause).strip()
    first_line = message.splitlines()[0] if message else ""
    return first_line or type(cause).__name__


def _foreign_key_violation(exc: BaseException | None) -> bool:
    """SQLite's and PostgreSQL's way of saying that a referenced row is missing (not any other constraint)."""
    if not isinstance(exc, IntegrityError):
        return False
    driver_error = exc.orig
    code = getattr(driver_error, "sqlstate", None) or getattr(driver_error, "pgcode", None)  # psycopg 3, psycopg2
    return code == "23503" or "FOREIGN KEY constraint failed" in str(driver_error)


def _result_values(result: StepResult, finished: datetime) -> dict[str, object]:
    values: dict[str, object] = {
        "finished": _aware(finished),
        "verdict": Verdict(result.verdict).value,
        "samples": _dump(list(result.samples)),
        "exit_code": result.exit_code,
        "build_s": result.build_s,
        "run_s": result.run_s,
        "error_kind": None if result.error_kind is None else ErrorKind(result.error_kind).value,
        "detail": _text(result.detail),
        "log_path": _text(result.log_path),
        "image": None if result.image is None else _dump(result.image.summary()),
    }
    # The executor may know better where the step really ran (a Ray actor placed on another node).
    if result.worker:
        values["worker"] = _text(result.worker)
    if result.node:
        values["node"] = _text(result.node)
    if result.gpus:
        values["gpus"] = _dump(list(result.gpus))
    return values


def _text(value: str) -> str:
    """Text as every backend stores it: PostgreSQL refuses NUL characters, so each becomes U+FFFD."""
    return value.replace("\x00", "\ufffd")


def _inserted_id(result: CursorResult[Any]) -> int:
    key = result.inserted_primary_key
    assert key is not None, "an INSERT of one row has a primary key"
    return int(key[0])


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value.isoformat()}: the store needs timezone-aware ones")
    return value


def _dump(value: object) -> str:
    return json.dumps(value)


def _load(text_value: str) -> Any:
    return json.loads(text_value)


def _bisect_record(row: Row[Any]) -> BisectRecord:
    return BisectRecord(
        id=row.id,
        repo=row.repo,
        good=row.good,
        bad=row.bad,
        spec=_load(row.spec),
        status=BisectStatus(row.status),
        created=row.created,
        finished=row.finished,
        first_bad=row.first_bad,
        last_good=row.last_good,
        message=row.message,
        extra=_load(row.extra),
        owner=row.owner,
        heartbeat=row.heartbeat,
    )


def _step_record(row: Row[Any]) -> StepRecord:
    return StepRecord(
        id=row.id,
        bisect_id=row.bisect_id,
        sha=row.sha,
        attempt=row.attempt,
        worker=row.worker,
        node=row.node,
        gpus=tuple(_load(row.gpus)),
        started=row.started,
        finished=row.finished,
        build_s=row.build_s,
        run_s=row.run_s,
        exit_code=row.exit_code,
        verdict=None if row.verdict is None else Verdict(row.verdict),
        samples=tuple(_load(row.samples)),
        log_path=row.log_path,
        error_kind=None if row.error_kind is None else ErrorKind(row.error_kind),
        detail=row.detail,
        purpose=StepPurpose(row.purpose),
        image=None if row.image is None else _load(row.image),
    )
