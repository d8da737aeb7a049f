"""Values as the tables hold them, and rows turned into vocab.domain records: the store's edge.

Every module of db/ that writes or reads bisects and steps converts through here, so a column has one encoding.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, Row

from bisector.vocab.domain import BisectRecord, BisectStatus, ErrorKind, StepPurpose, StepRecord, StepResult, Verdict


def stored_text(value: str) -> str:
    """Text as every backend stores it: PostgreSQL refuses NUL characters, so each becomes U+FFFD."""
    return value.replace("\x00", "\ufffd")


def inserted_id(result: CursorResult[Any]) -> int:
    key = result.inserted_primary_key
    assert key is not None, "an INSERT of one row has a primary key"
    return int(key[0])


def aware(value: datetime) -> datetime:
    """value itself; ValueError for a naive datetime (the store holds timezone-aware ones only)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value.isoformat()}: the store needs timezone-aware ones")
    return value


def dump(value: object) -> str:
    """JSON text of value; TypeError when it is not JSON-able."""
    return json.dumps(value)


def load(text_value: str) -> Any:
    return json.loads(text_value)


def result_values(result: StepResult, finished: datetime) -> dict[str, object]:
    """The columns of a finished step."""
    values: dict[str, object] = {
        "finished": aware(finished),
        "verdict": Verdict(result.verdict).value,
        "samples": dump(list(result.samples)),
        "exit_code": result.exit_code,
        "build_s": result.build_s,
        "run_s": result.run_s,
        "error_kind": None if result.error_kind is None else ErrorKind(result.error_kind).value,
        "detail": stored_text(result.detail),
        "log_path": stored_text(result.log_path),
        "image": None if result.image is None else dump(result.image.summary()),
    }
    # The executor may know better where the step really ran (a Ray actor placed on another node).
    if result.worker:
        values["worker"] = stored_text(result.worker)
    if result.node:
        values["node"] = stored_text(result.node)
    if result.gpus:
        values["gpus"] = dump(list(result.gpus))
    return values


def bisect_record(row: Row[Any]) -> BisectRecord:
    return BisectRecord(
        id=row.id,
        repo=row.repo,
        good=row.good,
        bad=row.bad,
        spec=load(row.spec),
        status=BisectStatus(row.status),
        created=row.created,
        finished=row.finished,
        first_bad=row.first_bad,
        last_good=row.last_good,
        message=row.message,
        extra=load(row.extra),
        owner=row.owner,
        heartbeat=row.heartbeat,
        lease_ttl_s=row.lease_ttl_s,
    )


def step_record(row: Row[Any]) -> StepRecord:
    return StepRecord(
        id=row.id,
        bisect_id=row.bisect_id,
        sha=row.sha,
        attempt=row.attempt,
        worker=row.worker,
        node=row.node,
        gpus=tuple(load(row.gpus)),
        started=row.started,
        finished=row.finished,
        build_s=row.build_s,
        run_s=row.run_s,
        exit_code=row.exit_code,
        verdict=None if row.verdict is None else Verdict(row.verdict),
        samples=tuple(load(row.samples)),
        log_path=row.log_path,
        error_kind=None if row.error_kind is None else ErrorKind(row.error_kind),
        detail=row.detail,
        purpose=StepPurpose(row.purpose),
        image=None if row.image is None else load(row.image),
    )
