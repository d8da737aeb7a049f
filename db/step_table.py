"""SQL of the steps table (db/schema.py): steps started, finished, marked by a person, interrupted.

Called by db/store.py's Store with a connection inside the Store's transaction; rows become StepRecords here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, case, func, insert, literal, not_, select, update

from bisector.db.images import record_images
from bisector.db.rows import aware, dump, inserted_id, load, result_values, step_record, stored_text
from bisector.db.schema import UTCDateTime, bisects, steps
from bisector.vocab.cost import gpu_seconds
from bisector.vocab.domain import ErrorKind, StepPurpose, StepRecord, StepResult, Verdict

INTERRUPTED_DETAIL = "coordinator stopped while the step ran"
RERUN_DIED_DETAIL = "the `run-at --bisect` process running it died"


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


@dataclass(frozen=True)
class Refusal:
    """A result not written: its step has a verdict already (verdict), or no such step exists (sha empty)."""

    step_id: int
    sha: str = ""
    verdict: str = ""


def insert_steps(conn: Connection, bisect_id: int, new_steps: Sequence[NewStep]) -> list[int]:
    """Running steps (verdict NULL); their ids in order. The foreign key refuses a step of an unknown bisect."""
    rows = [
        {
            "bisect_id": bisect_id,
            "sha": step.sha,
            "attempt": step.attempt,
            "worker": stored_text(step.worker),
            "node": stored_text(step.node),
            "gpus": dump(list(step.gpus)),
            "started": aware(step.started),
            "samples": dump([]),
            "log_path": "",
            "detail": "",
            "purpose": StepPurpose(step.purpose).value,
        }
        for step in new_steps
    ]
    return [inserted_id(conn.execute(insert(steps), values)) for values in rows]


def place_steps(conn: Connection, placements: Sequence[tuple[int, str, tuple[int, ...]]]) -> None:
    """Where running steps were sent (step id, node, GPU ids), so that one that never reports back (its coordinator
    killed) still counts its GPU time when it is stored as interrupted."""
    for step_id, node, gpus in placements:
        guarded = update(steps).where(steps.c.id == step_id, steps.c.verdict.is_(None))
        conn.execute(guarded.values(node=stored_text(node), gpus=dump(list(gpus))))


def finish_steps(conn: Connection, results: Sequence[tuple[int, StepResult, datetime]]) -> list[Refusal]:
    """Write each result on its step if the step has no verdict yet (adding its GPU-seconds to its bisect and
    its image to the images table), the steps' bisects' rows locked first; the results not written."""
    refused: list[Refusal] = []
    written: list[int] = []
    _lock_bisects_of(conn, [step_id for step_id, _, _ in results])
    for step_id, result, finished in results:
        guarded = update(steps).where(steps.c.id == step_id, steps.c.verdict.is_(None))
        if conn.execute(guarded.values(result_values(result, finished))).rowcount == 1:
            written.append(step_id)
            if result.image is not None:
                record_images(conn, [result.image])
            continue
        row = conn.execute(select(steps.c.sha, steps.c.verdict).where(steps.c.id == step_id)).one_or_none()
        refused.append(Refusal(step_id) if row is None else Refusal(step_id, row.sha, str(row.verdict)))
    add_gpu_seconds(conn, written)
    return refused


def select_steps(conn: Connection, bisect_id: int) -> list[StepRecord]:
    """Every step of a bisect, by id (the order they started in)."""
    query = select(steps).where(steps.c.bisect_id == bisect_id).order_by(steps.c.id)
    return [step_record(row) for row in conn.execute(query)]


def insert_manual_step(
    conn: Connection, bisect_id: int, sha: str, verdict: Verdict, detail: str, when: datetime
) -> int:
    """A finished step of purpose manual that ran nothing, attempt numbered after the commit's other steps."""
    attempt = conn.execute(
        select(func.count()).select_from(steps).where(steps.c.bisect_id == bisect_id, steps.c.sha == sha)
    ).scalar_one()
    values = {
        "bisect_id": bisect_id, "sha": sha, "attempt": int(attempt) + 1, "worker": "", "node": "",
        "gpus": dump([]), "started": aware(when), "finished": aware(when), "verdict": Verdict(verdict).value,
        "samples": dump([]), "log_path": "", "detail": detail, "purpose": StepPurpose.MANUAL.value,
    }  # fmt: skip
    return inserted_id(conn.execute(insert(steps).values(values)))


def select_manual_steps(conn: Connection, bisect_id: int, after_id: int) -> list[StepRecord]:
    query = (
        select(steps)
        .where(steps.c.bisect_id == bisect_id, steps.c.purpose == StepPurpose.MANUAL.value, steps.c.id > after_id)
        .order_by(steps.c.id)
    )
    return [step_record(row) for row in conn.execute(query)]


def all_but_reruns_at(shas: Collection[str]) -> ColumnElement[bool]:
    """A filter for interrupt_steps: every step but the rerun steps at these commits."""
    return not_(and_(steps.c.purpose == StepPurpose.RERUN.value, steps.c.sha.in_(list(shas))))


def reruns_at(shas: Collection[str]) -> ColumnElement[bool]:
    """A filter for interrupt_steps: the rerun steps at these commits."""
    return and_(steps.c.purpose == StepPurpose.RERUN.value, steps.c.sha.in_(list(shas)))


def interrupt_steps(
    conn: Connection, bisect_id: int, which: ColumnElement[bool], finished: datetime, detail: str
) -> int:
    """Mark the bisect's running steps that match which as interrupted errors that ended at finished (a step started
    later: at its start), adding the GPU-seconds of those this statement changed (not of one a concurrent transaction
    finished meanwhile) to the bisect; how many. The caller holds the bisect's row lock, as finish_steps takes it, so
    the two lock their rows in one order."""
    ended = literal(aware(finished), UTCDateTime())
    query = (
        update(steps)
        .where(steps.c.bisect_id == bisect_id, steps.c.verdict.is_(None), which)
        .values(
            verdict=Verdict.ERROR.value,
            error_kind=ErrorKind.INTERRUPTED.value,
            detail=detail,
            finished=case((steps.c.started > ended, steps.c.started), else_=ended),
        )
        .returning(steps.c.id)
    )
    interrupted = list(conn.execute(query).scalars())
    add_gpu_seconds(conn, interrupted)
    return len(interrupted)


def _lock_bisects_of(conn: Connection, step_ids: Sequence[int]) -> None:
    """Lock the rows of the bisects of these steps (by id) for the rest of the transaction: a transaction that
    changes steps and their bisect takes the bisect's row first, so that two of them cannot deadlock."""
    owners = select(steps.c.bisect_id).where(steps.c.id.in_(list(step_ids)))
    conn.execute(select(bisects.c.id).where(bisects.c.id.in_(owners)).order_by(bisects.c.id).with_for_update())


def add_gpu_seconds(conn: Connection, step_ids: Sequence[int]) -> None:
    """Add just-finished steps' GPU-seconds (vocab.cost) to their bisects' device_s, which the statistics sum."""
    if not step_ids:
        return
    held = select(steps.c.bisect_id, steps.c.gpus, steps.c.started, steps.c.finished).where(steps.c.id.in_(step_ids))
    for row in conn.execute(held).all():
        if (cost := gpu_seconds(load(row.gpus), row.started, row.finished)) > 0.0:
            add = update(bisects).where(bisects.c.id == row.bisect_id).values(device_s=bisects.c.device_s + cost)
            conn.execute(add)
