"""JobScheduler in this process over a SlotPool of real worker threads (InProcessExecutor), a real git history and
SQLite: reruns beside a running job, and a cancel that ends them."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from synthetic import SyntheticHistory, write_history

from bisector.core.options import VerifyEndpoints
from bisector.core.spec import BisectSpec, CommitTest, SearchPolicy
from bisector.db.jobs import JobQueue, JobState
from bisector.db.store import Store
from bisector.report import BisectReport
from bisector.runner.coordinator import CancelOutcome, Coordinator, prepare_bisect
from bisector.runner.manual import mark_commit
from bisector.runner.observer import SilentObserver
from bisector.runner.stopping import StopRequested
from bisector.service.config import ServiceConfig
from bisector.service.mirrors import Mirrors
from bisector.service.scheduler import JobScheduler
from bisector.service.service import BisectService
from bisector.service.tokens import Person
from bisector.vocab.domain import BisectRecord, BisectStatus, StepPurpose, StepRecord, StepResult, Verdict
from bisector.vocab.errors import StateError
from bisector.workers.executor import Executor
from bisector.workers.inprocess import InProcessExecutor
from bisector.workers.pool import PREEMPTED, SlotPool, ViewKey

WAIT_S = 120.0  # only ends a hung test; no speed target

# Steps block while the gate file exists, except at the commits listed in $OPEN (the bisect's endpoints).
GATE_SCRIPT = """\
if [ -e "$GATE" ]; then
  case " $OPEN " in
    *" $(git rev-parse HEAD) "*) ;;
    *) while [ -e "$GATE" ]; do sleep 0.05; done ;;
  esac
fi
exec bash test.sh
"""


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def history(tmp_path: Path) -> SyntheticHistory:
    return write_history(tmp_path / "repo", ["good"] * 5 + ["bad"] * 7)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{tmp_path / 'bisect.db'}") as opened:
        yield opened


@pytest.fixture
def scheduler(store: Store, history: SyntheticHistory) -> Iterator[JobScheduler]:
    pool = SlotPool(InProcessExecutor(str(history.path), 2), stop_error=lambda: StopRequested(signal.SIGTERM))
    started = JobScheduler(store, pool)
    yield started
    started.stop()
    pool.close()


def gated_test(tmp_path: Path, open_at: tuple[str, ...]) -> CommitTest:
    """A test that blocks while tmp_path/gate exists, except at the commits open_at."""
    (tmp_path / "gate.sh").write_text(GATE_SCRIPT)
    env = {"GATE": str(tmp_path / "gate"), "OPEN": " ".join(open_at)}
    return CommitTest(run=f"bash {tmp_path / 'gate.sh'}", env=env)


def queued(store: Store, scheduler: JobScheduler, history: SyntheticHistory, test: CommitTest) -> int:
    spec = BisectSpec(repo=str(history.path), good=history.shas[0], bad=history.shas[-1], test=test,
                      search=SearchPolicy(verify_endpoints=VerifyEndpoints.FIRST))  # fmt: skip
    bisect_id = prepare_bisect(store, spec)
    scheduler.add(bisect_id, priority=0, source=str(history.path), owner="alice")
    return bisect_id


def test_a_rerun_that_preempts_its_own_bisects_probe_is_named_as_that_bisects_rerun(
    tmp_path: Path, store: Store, scheduler: JobScheduler, history: SyntheticHistory
) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    endpoints = (history.shas[0], history.shas[-1])
    bisect_id = queued(store, scheduler, history, gated_test(tmp_path, open_at=endpoints))

    def probes() -> list[StepRecord]:
        return [s for s in store.steps(bisect_id) if s.sha not in endpoints]

    scheduler.start()
    wait_for("the job's probes on both slots", lambda: sum(s.finished is None for s in probes()) == 2)
    scheduler.rerun(scheduler.queue.get(bisect_id), history.shas[0])
    wait_for("the preempted probe stored", lambda: any(s.verdict is Verdict.CANCELLED for s in probes()))

    [preempted] = [s for s in probes() if s.verdict is Verdict.CANCELLED]
    assert preempted.detail.startswith(f"{PREEMPTED}: its slot went to the rerun of bisect {bisect_id},")
    gate.unlink()
    wait_for("the bisect", lambda: store.get_bisect(bisect_id).status.is_terminal())
    assert "to give a rerun a slot" in BisectReport.load(store, bisect_id).work_sentence()
    wait_for("the rerun", lambda: [s.verdict for s in store.steps(bisect_id) if s.purpose is StepPurpose.RERUN]
             == [Verdict.GOOD])  # fmt: skip


def test_reruns_one_after_another_leave_no_thread_behind(
    tmp_path: Path, store: Store, scheduler: JobScheduler, history: SyntheticHistory
) -> None:
    bisect_id = queued(store, scheduler, history, gated_test(tmp_path, open_at=()))
    job = scheduler.queue.get(bisect_id)
    for done in range(1, 4):
        (tmp_path / "gate").touch()
        scheduler.rerun(job, history.shas[-1])
        with pytest.raises(StateError, match=f"bisect {bisect_id} has a rerun running: one at a time"):
            scheduler.rerun(job, history.shas[0])
        (tmp_path / "gate").unlink()
        wait_for(f"rerun {done} let go", lambda: scheduler.reruns() == [])
    reruns = [s for s in store.steps(bisect_id) if s.purpose is StepPurpose.RERUN]
    assert [(s.sha, s.verdict) for s in reruns] == [(history.shas[-1], Verdict.BAD)] * 3


def rerun_steps(store: Store, bisect_id: int) -> list[StepRecord]:
    return [s for s in store.steps(bisect_id) if s.purpose is StepPurpose.RERUN]


def test_a_cancel_stops_the_bisects_running_rerun_and_stores_its_step_as_cancelled(
    tmp_path: Path, store: Store, scheduler: JobScheduler, history: SyntheticHistory
) -> None:
    (tmp_path / "gate").touch()  # every step blocks until cancelled
    bisect_id = queued(store, scheduler, history, gated_test(tmp_path, open_at=()))
    scheduler.rerun(scheduler.queue.get(bisect_id), history.shas[2])
    wait_for("the rerun's step", lambda: [s.finished for s in rerun_steps(store, bisect_id)] == [None])

    outcome = scheduler.cancel(scheduler.queue.get(bisect_id))
    assert outcome == CancelOutcome(BisectStatus.CANCELLED, (history.shas[2],), ended_before=False)
    wait_for("the rerun let go", lambda: scheduler.reruns() == [])
    [step] = rerun_steps(store, bisect_id)
    assert (step.verdict, step.detail) == (Verdict.CANCELLED, "cancelled by the operator")
    assert store.get_bisect(bisect_id).status is BisectStatus.CANCELLED

    scheduler.rerun(scheduler.queue.get(bisect_id), history.shas[3])  # of an ended bisect: its rerun alone
    stopped = CancelOutcome(BisectStatus.CANCELLED, (history.shas[3],), ended_before=True)
    assert scheduler.cancel(scheduler.queue.get(bisect_id)) == stopped
    wait_for("the second rerun let go", lambda: scheduler.reruns() == [])
    with pytest.raises(StateError, match=f"bisect {bisect_id} is already cancelled"):
        scheduler.cancel(scheduler.queue.get(bisect_id))
    assert all(s.verdict is Verdict.CANCELLED for s in rerun_steps(store, bisect_id))


def test_a_cancel_ends_a_rerun_waiting_for_a_slot_before_it_starts(
    tmp_path: Path, store: Store, scheduler: JobScheduler, history: SyntheticHistory
) -> None:
    (tmp_path / "gate").touch()  # two jobs hold a slot each, neither over its share: nothing to preempt
    first, second = (queued(store, scheduler, history, gated_test(tmp_path, open_at=())) for _ in range(2))

    def running(bisect_id: int) -> int:
        return sum(s.finished is None for s in store.steps(bisect_id))

    scheduler.start()
    wait_for("a step of each job", lambda: (running(first), running(second)) == (1, 1))
    scheduler.rerun(scheduler.queue.get(first), history.shas[2])
    wait_for("the rerun waiting in the pool", lambda: ViewKey(first, rerun=True) in scheduler.pool.shares())

    stopped = CancelOutcome(BisectStatus.CANCELLED, (history.shas[2],), ended_before=False)
    assert scheduler.cancel(scheduler.queue.get(first)) == stopped
    wait_for("the rerun let go", lambda: scheduler.reruns() == [])
    wait_for("the cancelled job's step stopped", lambda: running(first) == 0)
    assert rerun_steps(store, first) == []
    (tmp_path / "gate").unlink()


class RerunEndingJustBeforeTheCancel(Coordinator):
    """Its rerun's step ends and is stored; its thread is let go only once a cancel has been asked."""

    step_stored = threading.Event()

    def rerun(
        self,
        bisect_id: int,
        rev: str,
        times: int = 1,
        executor_overrides: Mapping[str, object] | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> list[StepResult]:
        results = super().rerun(bisect_id, rev, times, executor_overrides, cancelled)
        self.step_stored.set()
        wait_for("the cancel", cancelled)
        return results


def test_a_cancel_does_not_name_a_rerun_that_ended_by_itself_just_before_it(
    store: Store, history: SyntheticHistory
) -> None:
    pool = SlotPool(InProcessExecutor(str(history.path), 2), stop_error=lambda: StopRequested(signal.SIGTERM))

    def coordinator(store: Store, views: Callable[[BisectSpec], Executor]) -> Coordinator:
        return RerunEndingJustBeforeTheCancel(store, views)

    scheduler = JobScheduler(store, pool, coordinator)
    try:
        bisect_id = queued(store, scheduler, history, CommitTest(run="bash test.sh"))
        for ended_before in (False, True):
            RerunEndingJustBeforeTheCancel.step_stored.clear()
            scheduler.rerun(scheduler.queue.get(bisect_id), history.shas[-1])
            wait_for("the rerun's step stored", RerunEndingJustBeforeTheCancel.step_stored.is_set)
            if ended_before:  # of an ended bisect, the cancel had only its rerun to stop
                with pytest.raises(StateError, match=f"bisect {bisect_id} is already cancelled"):
                    scheduler.cancel(scheduler.queue.get(bisect_id))
            else:
                outcome = scheduler.cancel(scheduler.queue.get(bisect_id))
                assert outcome == CancelOutcome(BisectStatus.CANCELLED, (), ended_before=False)
            wait_for("the rerun let go", lambda: scheduler.reruns() == [])
        assert [s.verdict for s in rerun_steps(store, bisect_id)] == [Verdict.BAD, Verdict.BAD]
    finally:
        scheduler.stop()
        pool.close()


class MarkingWhileExplaining(SilentObserver):
    """Once the coordinator starts explaining its culprit, the culprit is marked good (as `POST .../marks` does):
    the bisect is reopened while its coordinator still runs."""

    def __init__(self, store: Store, scheduler: Callable[[], JobScheduler], sha: str) -> None:
        self.store, self.scheduler, self.sha = store, scheduler, sha
        self.reopened: list[bool] = []

    def note(self, message: str) -> None:
        if "now explaining it" in message and not self.reopened:
            [bisect_id] = [job.bisect_id for job in self.scheduler().queue.open_jobs()]
            outcome = mark_commit(self.store, bisect_id, self.sha, "good", who="alice")
            self.reopened.append(outcome.reopened)
            self.scheduler().reopened(bisect_id)


def test_a_bisect_reopened_by_a_mark_while_its_culprit_is_explained_is_resumed(
    store: Store, history: SyntheticHistory
) -> None:
    """The job is not marked done under a bisect that runs again: the server resumes it and names the next culprit."""
    pool = SlotPool(InProcessExecutor(str(history.path), 2), stop_error=lambda: StopRequested(signal.SIGTERM))
    first_bad = history.shas[5]
    observer = MarkingWhileExplaining(store, lambda: served, first_bad)

    def coordinator(store: Store, views: Callable[[BisectSpec], Executor]) -> Coordinator:
        return Coordinator(store, views, observer=observer)

    served = JobScheduler(store, pool, coordinator)
    try:
        bisect_id = queued(store, served, history, CommitTest(run="bash test.sh"))
        served.start()
        wait_for("the job done", lambda: served.queue.get(bisect_id).state is JobState.DONE)
        assert observer.reopened == [True]
        record = store.get_bisect(bisect_id)
        assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[6])
    finally:
        served.stop()
        pool.close()


class ReturningFromItsPause(Coordinator):
    """Its first resume finds the bisect paused and returns once `released` is set; later resumes are counted."""

    entered, released = threading.Event(), threading.Event()
    resumes: ClassVar[list[int]] = []

    def resume(
        self, bisect_id: int, executor_overrides: Mapping[str, object] | None = None, *, explain: bool | None = None
    ) -> BisectRecord:
        self.resumes.append(bisect_id)
        self.entered.set()
        wait_for("the release", self.released.is_set)
        return self.store.get_bisect(bisect_id)


@dataclass(frozen=True)
class OwnerWhileTheCoordinatorReturns(Person):
    """The job's owner, whose check (after the resume read the job, before it sets the bisect running) lasts until
    the job's coordinator has returned from its pause and the server marked the job done."""

    queue: JobQueue | None = None

    def may_act_on(self, owner: str | None) -> bool:
        assert self.queue is not None
        ReturningFromItsPause.released.set()
        wait_for("the job done", lambda: self.queue is not None and self.queue.get(1).state is JobState.DONE)
        return super().may_act_on(owner)


def test_a_resume_that_read_the_job_running_while_its_coordinator_returned_from_the_pause_queues_it(
    tmp_path: Path, store: Store, history: SyntheticHistory
) -> None:
    """The job read running, then done by its coordinator's return (the bisect still paused): the resume queues it."""
    pool = SlotPool(InProcessExecutor(str(history.path), 1), stop_error=lambda: StopRequested(signal.SIGTERM))
    served = JobScheduler(store, pool, ReturningFromItsPause)
    config = ServiceConfig(allowed_repos=(str(history.path),), mirror_dir=tmp_path / "mirrors")
    service = BisectService(config, store, Mirrors(config.mirror_dir, config.allowed_repos), served)
    try:
        bisect_id = queued(store, served, history, CommitTest(run="bash test.sh"))
        assert bisect_id == 1
        store.set_status(bisect_id, BisectStatus.PAUSED, message="the harness kept failing")
        served.start()
        wait_for("the coordinator", ReturningFromItsPause.entered.is_set)
        assert served.queue.get(bisect_id).state is JobState.RUNNING

        resumed = service.resume(bisect_id, OwnerWhileTheCoordinatorReturns("alice", False, served.queue))

        assert resumed.resumed
        assert resumed.state != "done"
        wait_for("the job resumed again", lambda: len(ReturningFromItsPause.resumes) >= 2)
    finally:
        served.stop()
        pool.close()
