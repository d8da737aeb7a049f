"""A server killed (SIGKILL) mid-job and started again finishes the job without re-running finished steps, and
starts the jobs that were still queued."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from service_process import DONE_TIMEOUT_S, TOKEN, ServiceProcess, service_env, service_home
from synthetic import SyntheticHistory, culprit_history

from bisector.core.spec import BisectSpec
from bisector.db.jobs import JobQueue, JobState, duplicate_of
from bisector.db.store import Store
from bisector.runner.coordinator import prepare_bisect
from bisector.vocab.domain import BisectStatus, StepPurpose, StepRecord
from bisector.vocab.errors import UnknownBisectError

pytestmark = pytest.mark.xdist_group("service")


def finished_steps(db: str, bisect_id: int) -> list[StepRecord]:
    with Store.open(db, read_only=True) as store:
        return [s for s in store.steps(bisect_id) if s.verdict is not None]


def one_slot_server(
    tmp_path: Path, history: SyntheticHistory, db: str
) -> tuple[list[str], dict[str, str], dict[str, object]]:
    """`bisect serve`'s arguments (one slot, the synthetic recipe), its environment, and a request for history."""
    config = tmp_path / "serve.toml"
    config.write_text('[recipes.synthetic]\nrun = "bash test.sh"\n')
    args = ["--db", db, "--allow-repo", str(history.path), "--config", str(config), "--slots", "1"]
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "synthetic", "explain": False}
    return args, service_home(tmp_path), body


def test_a_killed_server_resumes_its_job_without_repeating_finished_steps(tmp_path: Path, store_url: str) -> None:
    history = culprit_history(tmp_path / "repo", 40, 29, sleep_s=0.6)
    db = store_url
    args, home, body = one_slot_server(tmp_path, history, db)
    first = ServiceProcess(args, service_env(**home))
    first.start()
    try:
        bisect_id = first.post(body).json()["id"]
        queued_id = first.post(body).json()["id"]  # waits behind the first: one slot
        deadline = time.monotonic() + DONE_TIMEOUT_S
        while len(finished_steps(db, bisect_id)) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        started = first.job(bisect_id)["started"]
        first.kill()
    finally:
        first.stop()
    before = finished_steps(db, bisect_id)
    with Store.open(db, read_only=True) as store:
        jobs = JobQueue(store)
        assert jobs.get(bisect_id).state is JobState.RUNNING
        assert jobs.get(queued_id).state is JobState.QUEUED

    second = ServiceProcess(args, service_env(**home))
    second.port, second.base = first.port, first.base  # the same address a client knew
    second.start()
    try:
        report = second.wait_done(bisect_id)
        queued_report = second.wait_done(queued_id)
        job = second.job(bisect_id)
    finally:
        second.stop()

    assert report["status"] == "found"
    assert report["first_bad"]["sha"] == history.shas[history.first_bad]
    assert job["started"] == started  # its first start, not the restart
    assert queued_report["first_bad"]["sha"] == history.shas[history.first_bad]
    after = finished_steps(db, bisect_id)
    assert [(s.id, s.sha, s.verdict) for s in after[: len(before)]] == [(s.id, s.sha, s.verdict) for s in before]
    tested_before = {s.sha for s in before if s.purpose is StepPurpose.SEARCH and s.verdict.value in ("good", "bad")}
    tested_again = [s.sha for s in after[len(before) :] if s.sha in tested_before]
    assert tested_again == []
    assert len(after) > len(before)  # the second server went on where the first stopped


def test_a_bisect_stored_by_a_server_that_died_before_queueing_it_is_queued_at_the_next_start(
    tmp_path: Path, store_url: str
) -> None:
    history = culprit_history(tmp_path / "repo", 16, 11, sleep_s=0.05)
    db = store_url
    args, home, body = one_slot_server(tmp_path, history, db)
    first = ServiceProcess(args, service_env(**home))
    first.start()
    try:
        served_id = first.post(body).json()["id"]
        first.wait_done(served_id)
    finally:
        first.stop()
    # What a server killed between storing a request's bisect and queueing its job leaves: the bisect (on the
    # server's mirror, with its source stored in the same transaction) and no job. Beside it, a local `bisect run`
    # left running (no source): not the server's to run.
    with Store.open(db) as store:
        spec = BisectSpec.from_json(store.get_bisect(served_id).spec)
        served = {"source": str(history.path), "owner": "default", "submission_key": "key-1", "recipe": "synthetic",
                  "priority": 0}  # fmt: skip
        stranded = prepare_bisect(store, spec, extra=served)
        local = prepare_bisect(store, spec)

    second = ServiceProcess(args, service_env(**home))
    second.start()
    try:
        report = second.wait_done(stranded)
    finally:
        second.stop()

    assert (report["status"], report["first_bad"]["sha"]) == ("found", history.shas[history.first_bad])
    with Store.open(db, read_only=True) as store:
        assert JobQueue(store).get(stranded).source == str(history.path)
        assert JobQueue(store).get(stranded).owner == "default"  # who submitted it, as the server stored it
        assert JobQueue(store).get(stranded).submission_key == "key-1"  # a retry of it gets it, not a second job
        with pytest.raises(UnknownBisectError):
            JobQueue(store).get(local)
        assert store.get_bisect(local).status is BisectStatus.RUNNING


def test_a_bisect_stored_with_a_submission_key_another_job_holds_is_cancelled_as_its_duplicate_at_the_start(
    tmp_path: Path, store_url: str
) -> None:
    """Two servers on one store given the same key at once: the second one's job insert fails on the key's unique
    index and leaves its bisect without a job (the server died before cancelling it). The next start cancels that
    bisect as the first job's duplicate, never runs it: the server starts, and a retry of the key gets the first job."""
    history = culprit_history(tmp_path / "repo", 16, 11, sleep_s=0.05)
    args, home, body = one_slot_server(tmp_path, history, store_url)
    keyed = {"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": "key-1"}
    first = ServiceProcess(args, service_env(**home))
    first.start()
    try:
        served_id = httpx.post(f"{first.base}/api/bisects", json=body, headers=keyed, timeout=120.0).json()["id"]
        first.wait_done(served_id)
    finally:
        first.stop()
    with Store.open(store_url) as store:
        spec = BisectSpec.from_json(store.get_bisect(served_id).spec)
        served = {"source": str(history.path), "owner": "default", "submission_key": "key-1", "recipe": "synthetic",
                  "priority": 0}  # fmt: skip
        orphan = prepare_bisect(store, spec, extra=served)

    second = ServiceProcess(args, service_env(**home))
    second.start()
    try:
        retried = httpx.post(f"{second.base}/api/bisects", json=body, headers=keyed, timeout=120.0)
    finally:
        second.stop()

    assert (retried.status_code, retried.json()["id"]) == (200, served_id)
    with Store.open(store_url, read_only=True) as store:
        duplicate = store.get_bisect(orphan)
        assert (duplicate.status, duplicate.message) == (BisectStatus.CANCELLED, duplicate_of(served_id))
        assert store.steps(orphan) == []
        with pytest.raises(UnknownBisectError):
            JobQueue(store).get(orphan)
