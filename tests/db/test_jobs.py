"""The service's job queue (db/jobs.py) over a real SQLite store: a job keeps its first start when a restarted
server takes it up again and when a reopened bisect's job is queued again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bisector.db import Store
from bisector.db.jobs import JobQueue, JobState

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_a_job_keeps_its_first_start(db_url: str) -> None:
    with Store.open(db_url) as store:
        bisect_id = store.create_bisect("repo", "g" * 40, "b" * 40, {}, T0)
        jobs = JobQueue(store)
        jobs.add(bisect_id, 0, "repo", T0, "alice")
        jobs.mark_running(bisect_id, T0 + timedelta(minutes=1))
        jobs.mark_running(bisect_id, T0 + timedelta(minutes=2))  # a restarted server resumes it
        assert jobs.get(bisect_id).started == T0 + timedelta(minutes=1)
        assert jobs.mark_done(bisect_id, T0 + timedelta(minutes=3))
        assert jobs.requeue(bisect_id)  # its bisect reopened (a mark) or resumed after a pause
        requeued = jobs.get(bisect_id)
        assert (requeued.state, requeued.started, requeued.finished) == (
            JobState.QUEUED, T0 + timedelta(minutes=1), None,
        )  # fmt: skip
        jobs.mark_running(bisect_id, T0 + timedelta(minutes=4))
        assert jobs.get(bisect_id).started == T0 + timedelta(minutes=1)
