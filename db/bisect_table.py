"""SQL of a bisect's own rows (db/schema.py): the bisect with its status, extra and lease, its candidate commits
(their SHAs, and the details of those described), and its findings.

Called by db/store.py's Store with a connection inside the Store's transaction; rows become domain records here.
A status change is guarded in its WHERE clause, so two processes cannot both make it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, Update, delete, exists, insert, select, update

from bisector.db.queries import metric_label
from bisector.db.rows import aware, bisect_record, dump, inserted_id, load, stored_text
from bisector.db.schema import bisects, candidates, findings, ranges
from bisector.vocab.commit_range import CommitRange
from bisector.vocab.domain import BisectRecord, BisectStatus, Commit

OPEN_STATUSES = [status.value for status in BisectStatus if not status.is_terminal()]
FINDING_COLUMNS = ("kind", "file", "name", "key", "before", "after", "line", "detail")


def bisect_exists(conn: Connection, bisect_id: int) -> bool:
    return bool(conn.execute(select(exists().where(bisects.c.id == bisect_id))).scalar())


def insert_bisect(
    conn: Connection,
    repo: str,
    good: str,
    bad: str,
    spec: dict[str, object],
    created: datetime,
    extra: Mapping[str, object] | None = None,
) -> int:
    values = {
        "repo": repo,
        "good": good,
        "bad": bad,
        "spec": dump(spec),
        "status": BisectStatus.RUNNING.value,
        "created": aware(created),
        "message": "",
        "extra": dump(dict(extra or {})),
        "metric": metric_label(spec),
    }
    return inserted_id(conn.execute(insert(bisects).values(values)))


def select_bisect(conn: Connection, bisect_id: int) -> BisectRecord | None:
    row = conn.execute(select(bisects).where(bisects.c.id == bisect_id)).one_or_none()
    return None if row is None else bisect_record(row)


def select_bisects(conn: Connection, limit: int) -> list[BisectRecord]:
    """The newest `limit` bisects, newest first."""
    query = select(bisects).order_by(bisects.c.created.desc(), bisects.c.id.desc()).limit(limit)
    return [bisect_record(row) for row in conn.execute(query)]


def status_update(
    bisect_id: int,
    status: BisectStatus,
    finished: datetime | None,
    first_bad: str | None,
    last_good: str | None,
    message: str | None,
) -> Update:
    """Move an open bisect to status (the other fields only when given); it changes no bisect in a terminal status."""
    values: dict[str, object] = {"status": BisectStatus(status).value}
    if finished is not None:
        values["finished"] = aware(finished)
    if first_bad is not None:
        values["first_bad"] = first_bad
    if last_good is not None:
        values["last_good"] = last_good
    if message is not None:
        values["message"] = message
    return update(bisects).where(bisects.c.id == bisect_id, bisects.c.status.in_(OPEN_STATUSES)).values(values)


def reopen_update(bisect_id: int, was: BisectStatus, message: str) -> Update:
    """Set a bisect back to running with no answer; it changes the bisect only while its status is `was`."""
    return (
        update(bisects)
        .where(bisects.c.id == bisect_id, bisects.c.status == BisectStatus(was).value)
        .values(status=BisectStatus.RUNNING.value, finished=None, first_bad=None, last_good=None, message=message)
    )


def current_status(conn: Connection, bisect_id: int) -> str | None:
    return conn.execute(select(bisects.c.status).where(bisects.c.id == bisect_id)).scalar()


def change_extra(
    conn: Connection, bisect_id: int, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any] | None:
    """Replace the bisect's `extra` object by change(it), its row locked meanwhile; the object as it was, or None
    when there is no bisect."""
    before = locked_extra(conn, bisect_id)
    if before is None:
        return None
    conn.execute(update(bisects).where(bisects.c.id == bisect_id).values(extra=dump(change(dict(before)))))
    return before


def locked_extra(conn: Connection, bisect_id: int) -> dict[str, Any] | None:
    """The bisect's `extra` object, its row locked for the rest of the transaction; None when there is no bisect."""
    current = conn.execute(select(bisects.c.extra).where(bisects.c.id == bisect_id).with_for_update()).scalar()
    return None if current is None else dict(load(current))


def merge_extra(conn: Connection, bisect_id: int, values: Mapping[str, object]) -> bool:
    """Merge values into the bisect's `extra` object (its row locked meanwhile); False when there is no bisect."""
    return change_extra(conn, bisect_id, lambda extra: {**extra, **values}) is not None


def lease_row(conn: Connection, bisect_id: int) -> Row[Any, Any, Any] | None:
    """The bisect's (owner, heartbeat, lease_ttl_s), its row locked for the rest of the transaction; None without a
    bisect."""
    lease = select(bisects.c.owner, bisects.c.heartbeat, bisects.c.lease_ttl_s)
    return conn.execute(lease.where(bisects.c.id == bisect_id).with_for_update()).one_or_none()


def set_owner(conn: Connection, bisect_id: int, owner: str, now: datetime, ttl_s: float) -> None:
    lease = {"owner": owner, "heartbeat": aware(now), "lease_ttl_s": ttl_s}
    conn.execute(update(bisects).where(bisects.c.id == bisect_id).values(lease))


def renew_lease(conn: Connection, bisect_id: int, owner: str, now: datetime) -> bool:
    """Record that owner is alive; False when it does not hold the lease."""
    query = update(bisects).where(bisects.c.id == bisect_id, bisects.c.owner == owner).values(heartbeat=aware(now))
    return bool(conn.execute(query).rowcount == 1)


def release_lease(conn: Connection, bisect_id: int, owner: str) -> None:
    """Give the lease up, if owner still holds it."""
    query = (
        update(bisects)
        .where(bisects.c.id == bisect_id, bisects.c.owner == owner)
        .values(owner=None, heartbeat=None, lease_ttl_s=None)
    )
    conn.execute(query)


def insert_candidates(conn: Connection, bisect_id: int, commits: CommitRange, first_position: int) -> None:
    """The candidates from first_position on: their SHAs in one ranges row, the details of the described ones."""
    if first_position < len(commits):
        text_value = commits.text(first_position)
        conn.execute(insert(ranges).values(bisect_id=bisect_id, first_position=first_position, shas=text_value))
    insert_described(conn, bisect_id, [c for c in commits.described() if c.position >= first_position])


def insert_described(conn: Connection, bisect_id: int, commits: Sequence[Commit]) -> None:
    """The details of described candidates; those stored already stay as they are."""
    wanted = {commit.position: commit for commit in commits if commit.described}
    if not wanted:
        return
    stored = select(candidates.c.position).where(
        candidates.c.bisect_id == bisect_id, candidates.c.position.in_(list(wanted))
    )
    known = set(conn.execute(stored).scalars())
    rows = [
        {
            "bisect_id": bisect_id,
            "position": commit.position,
            "sha": commit.sha,
            "subject": stored_text(commit.subject),
            "author": stored_text(commit.author),
            "date": aware(commit.date),
            "pr": commit.pr,
        }
        for commit in wanted.values()
        if commit.date is not None and commit.position not in known
    ]
    if rows:
        conn.execute(insert(candidates), rows)


def select_candidates(conn: Connection, bisect_id: int) -> CommitRange:
    """The candidates of a bisect with the details of those described."""
    chunks = select(ranges.c.shas).where(ranges.c.bisect_id == bisect_id).order_by(ranges.c.first_position)
    commits = CommitRange()
    for text_value in conn.execute(chunks).scalars():
        commits.extend_text(text_value)
    described = select(candidates).where(candidates.c.bisect_id == bisect_id)
    commits.describe(
        Commit(position=row.position, sha=row.sha, subject=row.subject, author=row.author, date=row.date, pr=row.pr)
        for row in conn.execute(described)
    )
    return commits


def replace_findings(
    conn: Connection, bisect_id: int, kinds: Iterable[str], rows: Sequence[Mapping[str, object]]
) -> None:
    """Replace a bisect's findings of the given kinds by rows (dicts as Finding.to_json makes them)."""
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
    conn.execute(delete(findings).where(findings.c.bisect_id == bisect_id, findings.c.kind.in_(list(kinds))))
    if values:
        conn.execute(insert(findings), values)


def select_findings(conn: Connection, bisect_id: int) -> list[dict[str, object]]:
    """A bisect's findings in the order they were stored, as dicts (Finding.from_json reads them)."""
    query = select(findings).where(findings.c.bisect_id == bisect_id).order_by(findings.c.id)
    return [{k: row._mapping[k] for k in FINDING_COLUMNS} for row in conn.execute(query)]
