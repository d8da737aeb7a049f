"""Read-only queries over many bisects: filtered lists and the rows the statistics aggregate.

Functions take a Connection from Store.reading() (so database errors become StoreErrors) and return plain
dataclasses; bisector/history.py turns them into lists, tables and statistics. Nothing here writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import islice
from typing import Any

from sqlalchemy import Connection, CursorResult, Row, Select, and_, case, exists, func, literal, select

from bisector.domain import BisectStatus
from db.schema import bisects, candidates, findings, steps

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
FETCH_BATCH = 500


@dataclass(frozen=True)
class BisectFilter:
    """Which bisects to list; every field None matches all. culprit_sha is a lower-case hex prefix."""

    repo: str | None = None
    status: BisectStatus | None = None
    metric: str | None = None  # a case-insensitive substring of metric_label()
    culprit_sha: str | None = None
    culprit_pr: int | None = None
    since: datetime | None = None


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


@dataclass(frozen=True)
class StatsRows:
    """What the statistics aggregate, for the bisects a filter selects (keys are bisect ids)."""

    bisects: list[BisectSummary]
    device_seconds: dict[int, float]  # sum over steps of (build_s + run_s) x max(1, number of GPUs)
    files: dict[int, set[str]]  # files named by the stored explanation (findings.file)
    tables: dict[int, set[str]]  # dispatch tables and thresholds named by it (findings.name)


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


def list_bisects(conn: Connection, where: BisectFilter, limit: int) -> list[BisectSummary]:
    """The newest `limit` bisects that match, newest first, with step counts."""
    matching = _matching(conn, where)
    try:
        summaries = list(islice(matching, limit))
    finally:
        matching.close()  # ends the query's cursor when the limit stops the reading early
    return _with_step_counts(conn, summaries)


def stats_rows(conn: Connection, where: BisectFilter) -> StatsRows:
    matching = list(_matching(conn, where))
    ids = {summary.id for summary in matching}
    selected = _bisect_ids(where)
    gpu_count = case(
        (steps.c.gpus == "[]", literal(1)),
        else_=func.length(steps.c.gpus) - func.length(func.replace(steps.c.gpus, ",", "")) + 1,
    )
    busy = (func.coalesce(steps.c.build_s, 0.0) + func.coalesce(steps.c.run_s, 0.0)) * gpu_count
    device_query = (
        select(steps.c.bisect_id, func.sum(busy)).where(steps.c.bisect_id.in_(selected)).group_by(steps.c.bisect_id)
    )
    device_seconds = {row[0]: float(row[1] or 0.0) for row in conn.execute(device_query) if row[0] in ids}
    found = _bisect_ids(where, found_only=True)
    files: dict[int, set[str]] = {}
    tables: dict[int, set[str]] = {}
    finding_query = select(findings.c.bisect_id, findings.c.kind, findings.c.file, findings.c.name).where(
        findings.c.bisect_id.in_(found)
    )
    for bisect_id, kind, file, name in conn.execute(finding_query):
        if bisect_id not in ids:
            continue
        if file and kind not in NON_FILE_KINDS:
            files.setdefault(bisect_id, set()).add(file)
        if name and kind in TABLE_KINDS:
            tables.setdefault(bisect_id, set()).add(name)
    return StatsRows(matching, device_seconds, files, tables)


def _bisect_ids(where: BisectFilter, *, found_only: bool = False) -> Select[Any]:
    query = select(bisects.c.id).where(*_sql_conditions(where))
    if found_only:
        query = query.where(bisects.c.status == BisectStatus.FOUND.value)
    return query


def _sql_conditions(where: BisectFilter) -> list[Any]:
    conditions: list[Any] = []
    if where.repo is not None:
        conditions.append(bisects.c.repo == where.repo)
    if where.status is not None:
        conditions.append(bisects.c.status == where.status.value)
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


def _matching(conn: Connection, where: BisectFilter) -> Generator[BisectSummary]:
    """Matching bisects newest first, read in batches (the metric filter is applied here, on the spec)."""
    culprit = candidates.alias("culprit")
    query = (
        select(
            bisects.c.id,
            bisects.c.repo,
            bisects.c.spec,
            bisects.c.status,
            bisects.c.created,
            bisects.c.finished,
            bisects.c.good,
            bisects.c.bad,
            bisects.c.first_bad,
            bisects.c.last_good,
            bisects.c.message,
            culprit.c.subject,
            culprit.c.author,
            culprit.c.pr,
        )
        .outerjoin(culprit, and_(culprit.c.bisect_id == bisects.c.id, culprit.c.sha == bisects.c.first_bad))
        .where(*_sql_conditions(where))
        .order_by(bisects.c.created.desc(), bisects.c.id.desc())
    )
    needle = where.metric.casefold() if where.metric else None
    with conn.execution_options(yield_per=FETCH_BATCH).execute(query) as result:
        yield from _summaries(result, needle)


def _summaries(rows: Iterable[Row[Any]] | CursorResult[Any], needle: str | None) -> Iterator[BisectSummary]:
    for row in rows:
        label = metric_label(json.loads(row.spec))
        if needle is not None and needle not in label.casefold():
            continue
        yield BisectSummary(
            id=row.id,
            repo=row.repo,
            metric=label,
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
        )


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
