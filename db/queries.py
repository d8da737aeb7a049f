"""Read-only queries over many bisects: filtered lists and the rows the statistics aggregate.

Functions take a Connection from Store.reading() (so database errors become StoreErrors) and return plain
dataclasses; bisector/report/history.py turns them into lists, tables and statistics. Nothing here writes.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, and_, case, exists, func, select

from bisector.db.schema import bisects, candidates, findings, jobs, steps
from bisector.vocab.domain import BisectStatus

# Finding kinds that name a dispatch table, threshold or tuning entry (bisector.analysis.FindingKind values).
TABLE_KINDS = (
    "table_entry",
    "constant",
    "autotune_config",
    "heuristic",
    "tuning_file",
    "native_array",
    "native_threshold",
    "dispatch_logic",
)
# Kinds whose `file` is not a file the culprit changed.
NON_FILE_KINDS = ("static_summary", "dispatch", "kernel_launch")


@dataclass(frozen=True)
class BisectFilter:
    """Which bisects to list; every field None matches all. culprit_sha is a lower-case hex prefix."""

    repo: str | None = None
    status: BisectStatus | None = None
    metric: str | None = None  # a case-insensitive substring of bisects.metric (metric_label of the spec)
    culprit_sha: str | None = None
    culprit_pr: int | None = None
    since: datetime | None = None
    owner: str | None = None  # who submitted it to a server (jobs.owner)


@dataclass(frozen=True)
class BisectSummary:
    """One line of a list of bisects, with its culprit's commit when it names one."""

    id: int
    repo: str
    metric: str
    status: BisectStatus
    created: datetime
    finished: datetime | None
    good: str
    bad: str
    first_bad: str | None
    last_good: str | None
    message: str
    culprit_subject: str | None
    culprit_author: str | None
    culprit_pr: int | None
    steps: int = 0
    steps_running: int = 0
    adhoc_outcome: str | None = None  # an ad hoc run's (`bisect run-at`, good = bad) verdict once it ended
    owner: str | None = None  # who submitted it to a server; None for a local bisect

    @property
    def status_label(self) -> str:
        """The status as a list shows it: an ad hoc run that ended shows its outcome ("adhoc bad")."""
        return f"adhoc {self.adhoc_outcome}" if self.adhoc_outcome else self.status.value


GroupKey = tuple[str, str]  # (repository, metric label)


@dataclass(frozen=True)
class StatsRows:
    """What the statistics aggregate, per (repository, metric), for the bisects a filter selects."""

    statuses: dict[GroupKey, dict[BisectStatus, int]]
    median_culprit_s: dict[GroupKey, float]  # the median of finished - created over found bisects
    gpu_seconds: dict[GroupKey, float]  # sum of bisects.device_s: vocab.cost.gpu_seconds of every finished step
    files: dict[GroupKey, list[tuple[str, int]]]  # findings.file -> found bisects naming it, most first
    tables: dict[GroupKey, list[tuple[str, int]]]  # findings.name of table-like findings -> found bisects
    authors: dict[GroupKey, list[tuple[str, int]]]  # author of the first bad commit -> found bisects
    weekly: dict[date, int]  # Monday of each week with bisects -> bisects created that week


def metric_label(spec: dict[str, object]) -> str:
    """A short name of what a bisect measured: the KEY of --metric-json, the literal text that opens the
    --metric regex (`metric: ([0-9.]+)` -> `metric`; the whole regex when it opens with a group), else
    `exit code`."""
    metric_json = spec.get("metric_json")
    if isinstance(metric_json, str) and metric_json:
        return metric_json.rpartition(":")[2] or metric_json
    regex = spec.get("metric")
    if isinstance(regex, str) and regex:
        literal_text = re.split(r"[\\()\[\].*+?{}|^$]", regex, maxsplit=1)[0].strip(" :=\t")
        return literal_text or regex
    return "exit code"


_job_owner = select(jobs.c.owner).where(jobs.c.bisect_id == bisects.c.id).scalar_subquery()  # who submitted it


def list_bisects(conn: Connection, where: BisectFilter, limit: int) -> list[BisectSummary]:
    """The newest `limit` bisects that match, newest first, with step counts."""
    culprit = candidates.alias("culprit")
    query = (
        select(
            bisects.c.id,
            bisects.c.repo,
            bisects.c.metric,
            bisects.c.status,
            bisects.c.created,
            bisects.c.finished,
            bisects.c.good,
            bisects.c.bad,
            bisects.c.first_bad,
            bisects.c.last_good,
            bisects.c.message,
            bisects.c.extra,
            culprit.c.subject,
            culprit.c.author,
            culprit.c.pr,
            _job_owner.label("owner"),
        )
        .outerjoin(culprit, and_(culprit.c.bisect_id == bisects.c.id, culprit.c.sha == bisects.c.first_bad))
        .where(*_conditions(where))
        .order_by(bisects.c.created.desc(), bisects.c.id.desc())
        .limit(limit)
    )
    summaries = [
        BisectSummary(
            id=row.id,
            repo=row.repo,
            metric=row.metric,
            status=BisectStatus(row.status),
            created=row.created,
            finished=row.finished,
            good=row.good,
            bad=row.bad,
            first_bad=row.first_bad,
            last_good=row.last_good,
            message=row.message,
            culprit_subject=row.subject,
            culprit_author=row.author,
            culprit_pr=row.pr,
            adhoc_outcome=_adhoc_outcome(row.good, row.bad, row.extra),
            owner=row.owner,
        )
        for row in conn.execute(query)
    ]
    return _with_step_counts(conn, summaries)


def _adhoc_outcome(good: str, bad: str, extra_json: str) -> str | None:
    """extra.outcome of an ad hoc run's row (good = bad); None for a bisect's."""
    if good != bad:
        return None
    extra = json.loads(extra_json or "{}")
    outcome = extra.get("outcome") if isinstance(extra, dict) else None
    return outcome if isinstance(outcome, str) else None


def bisect_ends(conn: Connection) -> dict[int, datetime | None]:
    """Every bisect's id and when it ended (None while it runs or is paused): the log retention's one query."""
    rows = conn.execute(select(bisects.c.id, bisects.c.status, bisects.c.finished))
    return {row.id: row.finished if BisectStatus(row.status).is_terminal() else None for row in rows}


def stats_rows(conn: Connection, where: BisectFilter, top: int) -> StatsRows:
    """The aggregates of the statistics, computed by the database (`top` entries of each frequency list)."""
    if conn.dialect.name == "postgresql":
        # These aggregates take milliseconds; PostgreSQL's JIT would spend a few hundred compiling them.
        conn.exec_driver_sql("SET LOCAL jit = off")
    conditions = [*_conditions(where), bisects.c.good != bisects.c.bad]  # ad hoc runs (`bisect run-at`) are no bisects
    group = (bisects.c.repo, bisects.c.metric)
    statuses: dict[GroupKey, dict[BisectStatus, int]] = defaultdict(dict)
    counts = select(*group, bisects.c.status, func.count()).where(*conditions).group_by(*group, bisects.c.status)
    for repo, metric, status, count in conn.execute(counts):
        statuses[(repo, metric)][BisectStatus(status)] = int(count)
    found = [*conditions, bisects.c.status == BisectStatus.FOUND.value]
    medians = _median_culprit_seconds(conn, [*found, bisects.c.finished.is_not(None)])
    gpu = select(*group, func.sum(bisects.c.device_s)).where(*conditions).group_by(*group)
    gpu_seconds = {(r, m): float(total or 0.0) for r, m, total in conn.execute(gpu)}
    file_rows = and_(findings.c.file != "", findings.c.kind.not_in(NON_FILE_KINDS))
    table_rows = and_(findings.c.name != "", findings.c.kind.in_(TABLE_KINDS))
    return StatsRows(
        statuses=dict(statuses),
        median_culprit_s=medians,
        gpu_seconds=gpu_seconds,
        files=_frequent(conn, findings.c.file, findings.c.bisect_id, file_rows, found, top),
        tables=_frequent(conn, findings.c.name, findings.c.bisect_id, table_rows, found, top),
        authors=_culprit_authors(conn, found, top),
        weekly=_weekly(conn, conditions),
    )


def _median_culprit_seconds(conn: Connection, conditions: list[Any]) -> dict[GroupKey, float]:
    """Per group, the median time from creation to the answer, in seconds to the millisecond. Seconds come from
    the database (parsing thousands of datetimes in Python cost more than the rest); PostgreSQL takes the median
    too (percentile_cont: the mean of the middle two, as statistics.median), SQLite has no median of its own."""
    took = _seconds_between(conn, bisects.c.created, bisects.c.finished)
    if conn.dialect.name == "postgresql":
        median = func.percentile_cont(0.5).within_group(took)
        query = select(bisects.c.repo, bisects.c.metric, median).where(*conditions)
        rows = conn.execute(query.group_by(bisects.c.repo, bisects.c.metric))
        return {(repo, metric): round(float(seconds), 3) for repo, metric, seconds in rows}
    times: dict[GroupKey, list[float]] = defaultdict(list)
    for repo, metric, seconds in conn.execute(select(bisects.c.repo, bisects.c.metric, took).where(*conditions)):
        times[(repo, metric)].append(round(float(seconds), 3))  # SQLite's julianday: exact to ~50 microseconds
    return {key: round(statistics.median(values), 3) for key, values in times.items()}


def _seconds_between(conn: Connection, start: Any, end: Any) -> Any:
    if conn.dialect.name == "sqlite":  # SQLite keeps datetimes as ISO text in UTC
        return (func.julianday(end) - func.julianday(start)) * 86400.0
    return func.extract("epoch", end - start)


def _weekly(conn: Connection, conditions: list[Any]) -> dict[date, int]:
    """Bisects created per ISO week, keyed by the week's Monday (UTC)."""
    if conn.dialect.name == "sqlite":
        monday: Any = func.date(bisects.c.created, "weekday 0", "-6 days")
    else:
        monday = func.date(func.date_trunc("week", func.timezone("UTC", bisects.c.created)))
    query = select(monday, func.count()).where(*conditions).group_by(monday)
    weeks = {}
    for week, count in conn.execute(query):
        weeks[week if isinstance(week, date) else date.fromisoformat(week)] = int(count)
    return weeks


def _frequent(
    conn: Connection, value: Any, bisect_id: Any, rows: Any, conditions: list[Any], top: int
) -> dict[GroupKey, list[tuple[str, int]]]:
    """Per group, the `top` values (of the `rows` of value's table) named by most bisects (ties by value),
    each bisect counted once."""
    query = (
        select(bisects.c.repo, bisects.c.metric, value, func.count(bisect_id.distinct()))
        .select_from(bisects)
        .join(value.table, and_(bisect_id == bisects.c.id, rows))
        .where(*conditions)
        .group_by(bisects.c.repo, bisects.c.metric, value)
    )
    grouped: dict[GroupKey, list[tuple[str, int]]] = defaultdict(list)
    for repo, metric, name, bisect_count in conn.execute(query):
        grouped[(repo, metric)].append((name, int(bisect_count)))
    return {key: sorted(pairs, key=lambda pair: (-pair[1], pair[0]))[:top] for key, pairs in grouped.items()}


def _culprit_authors(conn: Connection, found: list[Any], top: int) -> dict[GroupKey, list[tuple[str, int]]]:
    """Per group, the `top` authors of first bad commits. A correlated lookup per found bisect (through
    ix_candidates_bisect_id_sha): planners misjudge the two-column join and scan every candidate instead."""
    author = (
        select(candidates.c.author)
        .where(candidates.c.bisect_id == bisects.c.id, candidates.c.sha == bisects.c.first_bad)
        .limit(1)
        .scalar_subquery()
    )
    culprits = select(bisects.c.repo, bisects.c.metric, author.label("author")).where(*found).subquery()
    query = select(culprits.c.repo, culprits.c.metric, culprits.c.author, func.count()).where(
        culprits.c.author.is_not(None)
    )
    grouped: dict[GroupKey, list[tuple[str, int]]] = defaultdict(list)
    for repo, metric, name, count in conn.execute(
        query.group_by(culprits.c.repo, culprits.c.metric, culprits.c.author)
    ):
        grouped[(repo, metric)].append((name, int(count)))
    return {key: sorted(pairs, key=lambda pair: (-pair[1], pair[0]))[:top] for key, pairs in grouped.items()}


def _conditions(where: BisectFilter) -> list[Any]:
    conditions: list[Any] = []
    if where.owner is not None:
        conditions.append(_job_owner == where.owner)
    if where.repo is not None:
        conditions.append(bisects.c.repo == where.repo)
    if where.status is not None:  # an outcome of bisects: an ad hoc run's row (good = bad, `bisect run-at`) has none
        conditions += [bisects.c.status == where.status.value, bisects.c.good != bisects.c.bad]
    if where.metric is not None:
        conditions.append(func.lower(bisects.c.metric).contains(where.metric.lower(), autoescape=True))
    if where.since is not None:
        conditions.append(bisects.c.created >= where.since)
    if where.culprit_sha is not None:
        # Bounds instead of LIKE: the first_bad index serves a range, and a prefix has no wildcards to escape.
        conditions += [
            bisects.c.status == BisectStatus.FOUND.value,
            bisects.c.first_bad >= where.culprit_sha,
            bisects.c.first_bad < where.culprit_sha + "g",
        ]
    if where.culprit_pr is not None:
        conditions += [
            bisects.c.status == BisectStatus.FOUND.value,
            exists().where(
                candidates.c.bisect_id == bisects.c.id,
                candidates.c.sha == bisects.c.first_bad,
                candidates.c.pr == where.culprit_pr,
            ),
        ]
    return conditions


def _with_step_counts(conn: Connection, summaries: Sequence[BisectSummary]) -> list[BisectSummary]:
    if not summaries:
        return []
    running = func.sum(case((steps.c.verdict.is_(None), 1), else_=0))
    query = (
        select(steps.c.bisect_id, func.count(), running)
        .where(steps.c.bisect_id.in_([s.id for s in summaries]))
        .group_by(steps.c.bisect_id)
    )
    counts = {row[0]: (int(row[1]), int(row[2] or 0)) for row in conn.execute(query)}
    return [replace(s, steps=counts.get(s.id, (0, 0))[0], steps_running=counts.get(s.id, (0, 0))[1]) for s in summaries]
