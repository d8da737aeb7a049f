"""The result store: the one entry to the database. Rows become vocab.domain objects at its edge.

Its SQL lives in one module per table group (db/bisect_table.py, db/step_table.py, db/images.py, the read-only
db/queries.py), each called with a connection inside a transaction the Store opens; db/rows.py converts values.

Every write is its own transaction, committed before the method returns: the coordinator may be killed
at any moment, and `bisect resume` continues from what is stored. Errors of the database come out as
StoreError (one line naming the URL); misuse of the API (naive datetimes, values that are not JSON)
raises ValueError / TypeError.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, NamedTuple, Self

from sqlalchemy import ColumnElement, Connection, Engine, Update, text
from sqlalchemy.exc import IntegrityError, SQLAlchemyError, StatementError
from sqlalchemy.pool import StaticPool

from bisector.db import bisect_table, step_table
from bisector.db.engine import (
    WRITE_OPTIONS,
    database_identity,
    db_url,
    default_db_url,
    make_engine,
    make_read_only_engine,
    mask_url,
)
from bisector.db.images import delete_images, list_images
from bisector.db.migrate import at_head, upgrade
from bisector.db.rows import dump
from bisector.db.step_table import INTERRUPTED_DETAIL, RERUN_DIED_DETAIL, NewStep
from bisector.vocab.commit_range import CommitRange
from bisector.vocab.domain import (
    BisectRecord,
    BisectStatus,
    Commit,
    ImageInfo,
    StepPurpose,
    StepRecord,
    StepResult,
    Verdict,
)
from bisector.vocab.errors import StateError, StoreError, UnknownBisectError

__all__ = ["INTERRUPTED_DETAIL", "LeaseHolder", "NewStep", "Store"]


StepEnds = list[tuple[ColumnElement[bool], datetime]]  # which running steps to interrupt, and when each group ended


class LeaseHolder(NamedTuple):
    """The coordinator holding a bisect's lease: who, its last heartbeat, and its TTL (None for a lease taken
    before the store kept TTLs)."""

    owner: str
    heartbeat: datetime | None
    ttl_s: float | None


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
        return f"sqlite-memory:{id(self)}" if self.is_private else database_identity(self._engine.url)

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

    def create_bisect(
        self, repo: str, good: str, bad: str, spec: dict[str, object], created: datetime, **extra: object
    ) -> int:
        """extra: the bisect's first `extra` values, stored in the same transaction as the bisect."""
        with self._write() as conn:
            return bisect_table.insert_bisect(conn, repo, good, bad, spec, created, extra)

    def get_bisect(self, bisect_id: int) -> BisectRecord:
        with self._read() as conn:
            record = bisect_table.select_bisect(conn, bisect_id)
        if record is None:
            raise self._unknown(bisect_id)
        return record

    def list_bisects(self, limit: int = 50) -> list[BisectRecord]:
        """The newest `limit` bisects, newest first."""
        with self._read() as conn:
            return bisect_table.select_bisects(conn, limit)

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
        guarded = bisect_table.status_update(bisect_id, status, finished, first_bad, last_good, message)
        self._change_status(
            bisect_id,
            guarded,
            lambda current: f"bisect {bisect_id} is already {current}; it cannot become {status.value}",
        )

    def reopen(self, bisect_id: int, was: BisectStatus, message: str) -> None:
        """Set a finished bisect back to running (a person's verdict changed its answer; `bisect resume` continues).
        Guarded like set_status: only from status `was`, so two processes cannot both reopen it."""
        self._change_status(
            bisect_id,
            bisect_table.reopen_update(bisect_id, was, message),
            lambda current: f"bisect {bisect_id} is {current} now, not {was.value}; it was not reopened",
        )

    def _change_status(self, bisect_id: int, guarded: Update, refusal: Callable[[str], str]) -> None:
        """Run a status change whose WHERE clause holds its guard; StateError(refusal(current status)) when the
        guard did not hold, UnknownBisectError when there is no such bisect."""
        with self._write() as conn:
            if conn.execute(guarded).rowcount == 1:
                return
            current = bisect_table.current_status(conn, bisect_id)
        if current is None:
            raise self._unknown(bisect_id)
        raise StateError(refusal(current))

    def update_extra(self, bisect_id: int, **values: object) -> None:
        """Merge values (JSON-able) into the bisect's `extra` object."""
        dump(values)  # a TypeError for a value that is not JSON-able, before touching the database
        with self._write() as conn:
            if not bisect_table.merge_extra(conn, bisect_id, values):
                raise self._unknown(bisect_id)

    def change_extra(self, bisect_id: int, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Replace the bisect's `extra` object by change(it) in one transaction, its row locked meanwhile, so that
        processes changing one key at once do not undo each other's change; returns the object as it was."""
        with self._write() as conn:
            before = bisect_table.change_extra(conn, bisect_id, change)
        if before is None:
            raise self._unknown(bisect_id)
        return before

    # --- ownership -----------------------------------------------------------------------------------

    def claim_lease(
        self, bisect_id: int, owner: str, now: datetime, ttl_s: float, may_replace: Callable[[LeaseHolder], bool]
    ) -> LeaseHolder | None:
        """Make owner, whose lease lasts ttl_s after each heartbeat, the bisect's owner if nobody holds it, owner
        holds it already, or may_replace(holder) says the holder is gone. None when claimed, else the holder, who
        keeps it. Read and write are one transaction under the write lock, so two claimants cannot both win."""
        with self._write() as conn:
            row = bisect_table.lease_row(conn, bisect_id)
            if row is None:
                raise self._unknown(bisect_id)
            holder = LeaseHolder(row.owner, row.heartbeat, row.lease_ttl_s)
            if holder.owner not in (None, owner) and not may_replace(holder):
                return holder
            bisect_table.set_owner(conn, bisect_id, owner, now, ttl_s)
        return None

    def renew_lease(self, bisect_id: int, owner: str, now: datetime) -> bool:
        """Record that owner is alive; False when it no longer holds the lease (another coordinator took it)."""
        with self._write() as conn:
            return bisect_table.renew_lease(conn, bisect_id, owner, now)

    def release_lease(self, bisect_id: int, owner: str) -> None:
        """Give the lease up, if owner still holds it."""
        with self._write() as conn:
            bisect_table.release_lease(conn, bisect_id, owner)

    # --- candidates --------------------------------------------------------------------------------

    def add_candidates(self, bisect_id: int, candidates: CommitRange, first_position: int = 0) -> None:
        """Store a bisect's candidates from first_position on (0: its range; later, each merged branch descended
        into) with the details of the described ones among them, all in one transaction."""
        with self._write() as conn:
            self._require_bisect(conn, bisect_id)
            bisect_table.insert_candidates(conn, bisect_id, candidates, first_position)

    def describe(self, bisect_id: int, commits: Sequence[Commit]) -> None:
        """Store the details of described candidates of a bisect; those stored already stay as they are."""
        with self._write() as conn:
            self._require_bisect(conn, bisect_id)
            bisect_table.insert_described(conn, bisect_id, commits)

    def candidates(self, bisect_id: int) -> CommitRange:
        """The candidates of a bisect, with the details of the described ones."""
        with self._read() as conn:
            commits = bisect_table.select_candidates(conn, bisect_id)
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
        # No existence check first: the foreign key refuses a step of an unknown bisect, and the check cost more
        # than the insert on the coordinator's per-step path.
        try:
            with self._write() as conn:
                return step_table.insert_steps(conn, bisect_id, new_steps)
        except StoreError as exc:
            if _foreign_key_violation(exc.__cause__):
                raise self._unknown(bisect_id) from None
            raise

    def place_steps(self, placements: Sequence[tuple[int, str, tuple[int, ...]]]) -> None:
        """Record where running steps were sent: (step id, node, GPU ids), in one transaction."""
        if placements:
            with self._write() as conn:
                step_table.place_steps(conn, placements)

    def finish_step(self, step_id: int, result: StepResult, finished: datetime) -> None:
        """Write the result of a running step. A step that has a verdict already is left alone (StateError)."""
        self.finish_steps([(step_id, result, finished)])

    def finish_steps(self, results: Sequence[tuple[int, StepResult, datetime]]) -> None:
        """Write the results of running steps in one transaction (each as finish_step would). A step that has a
        verdict already is left alone; the others are written, then the first such refusal is raised."""
        for step_id, result, _ in results:
            if result.step_id != step_id:
                raise ValueError(f"result of step {result.step_id} given for step {step_id}")
        with self._write() as conn:
            refused = step_table.finish_steps(conn, results)
        if refused:
            first = refused[0]
            if not first.sha:
                raise StoreError(f"no step with id {first.step_id} in {self._url}")
            raise StateError(f"step {first.step_id} ({first.sha[:12]}) already has the verdict {first.verdict}")

    def steps(self, bisect_id: int) -> list[StepRecord]:
        """Every step of a bisect, by id (the order they started in)."""
        with self._read() as conn:
            records = step_table.select_steps(conn, bisect_id)
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
            return step_table.insert_manual_step(conn, bisect_id, sha, verdict, detail, when)

    def manual_steps(self, bisect_id: int, after_id: int = 0) -> list[StepRecord]:
        """The manual steps of a bisect stored after step after_id, by id (a running coordinator takes them in)."""
        with self._read() as conn:
            return step_table.select_manual_steps(conn, bisect_id, after_id)

    def interrupt_running_steps(
        self,
        bisect_id: int,
        finished: datetime,
        spared_reruns: Callable[[dict[str, Any]], Collection[str]] = lambda extra: (),
    ) -> int:
        """Mark the running steps of a bisect as interrupted errors that ended at finished (a step started later: at
        its start), but for its rerun steps at the commits that spared_reruns(its extra) names (reruns still running,
        maybe in other processes); how many there were. The extra is read with the bisect's row locked, in the same
        transaction: a rerun that registers there meanwhile (bisector/runner/reruns.py) starts its steps after."""

        def spare(extra: dict[str, Any]) -> tuple[dict[str, Any], StepEnds, str]:
            return extra, [(step_table.all_but_reruns_at(spared_reruns(extra)), finished)], INTERRUPTED_DETAIL

        return self._interrupt_steps(bisect_id, spare)

    def interrupt_reruns(
        self, bisect_id: int, ended: Callable[[dict[str, Any]], tuple[dict[str, Any], Mapping[str, datetime]]]
    ) -> int:
        """Replace the bisect's `extra` by ended(it)'s first part and mark its rerun steps still running at each commit
        of the second as interrupted errors that ended at the time it maps that commit to (a step started later: at
        its start), in one transaction with the bisect's row locked; how many."""

        def end(extra: dict[str, Any]) -> tuple[dict[str, Any], StepEnds, str]:
            kept, last_seen = ended(extra)
            return kept, [(step_table.reruns_at([sha]), seen) for sha, seen in last_seen.items()], RERUN_DIED_DETAIL

        return self._interrupt_steps(bisect_id, end)

    def _interrupt_steps(
        self,
        bisect_id: int,
        choose: Callable[[dict[str, Any]], tuple[dict[str, Any], StepEnds, str]],
    ) -> int:
        """With the bisect's row locked: replace its extra by choose(extra)'s first part (when it differs) and mark
        its running steps that match a filter of the second as interrupted errors that ended at that filter's time
        (step_table.interrupt_steps), with the third as detail; how many."""
        with self._write() as conn:
            extra = bisect_table.locked_extra(conn, bisect_id)
            if extra is None:
                raise self._unknown(bisect_id)
            kept, ends, detail = choose(extra)
            if kept != extra:
                bisect_table.change_extra(conn, bisect_id, lambda _: kept)
            return sum(step_table.interrupt_steps(conn, bisect_id, which, at, detail) for which, at in ends)

    # --- findings ----------------------------------------------------------------------------------

    def replace_findings(self, bisect_id: int, kinds: Iterable[str], rows: Sequence[Mapping[str, object]]) -> None:
        """Replace a bisect's findings of the given kinds by rows (dicts as Finding.to_json makes them)."""
        with self._write() as conn:
            self._require_bisect(conn, bisect_id)
            bisect_table.replace_findings(conn, bisect_id, kinds, rows)

    def findings(self, bisect_id: int) -> list[dict[str, object]]:
        """A bisect's findings in the order they were stored, as dicts (Finding.from_json reads them)."""
        with self._read() as conn:
            return bisect_table.select_findings(conn, bisect_id)

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

    # --- plumbing ----------------------------------------------------------------------------------

    def reading(self) -> AbstractContextManager[Connection]:
        """A read transaction for the read-only queries of db/queries.py; errors become StoreErrors."""
        return self._read()

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
        if not bisect_table.bisect_exists(conn, bisect_id):
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
