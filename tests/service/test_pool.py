"""SlotPool: fair shares, reservations, own results only, stop; over an InProcessExecutor running real commands."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from synthetic import culprit_history

from bisector.core.spec import BisectSpec, CommitTest
from bisector.db.store import Store
from bisector.runner.coordinator import Coordinator, prepare_bisect
from bisector.runner.observer import SilentObserver
from bisector.runner.pipeline import step_request
from bisector.runner.stopping import StopRequested
from bisector.vocab.domain import BisectStatus, StepResult, Verdict
from bisector.vocab.errors import ExecutorError
from bisector.vocab.processes import ProcessGroup, process_start
from bisector.workers.executor import StepRequest
from bisector.workers.inprocess import InProcessExecutor
from bisector.workers.local import LocalExecutor
from bisector.workers.pool import PREEMPTED, PoolView, SlotPool, ViewKey

WAIT_S = 120.0  # only ends a hung test; no speed target


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return culprit_history(tmp_path / "repo", 6, 3).path


@pytest.fixture
def pool(repo: Path) -> Iterator[SlotPool]:
    opened = SlotPool(
        InProcessExecutor(str(repo), 4), stop_error=lambda: StopRequested(signal.SIGTERM), idle_after_s=3600
    )
    yield opened
    opened.close()


@pytest.fixture
def lending_pool(repo: Path) -> Iterator[SlotPool]:
    """Two slots; a view holding nothing is idle as soon as its coordinator is out of the pool."""
    opened = SlotPool(InProcessExecutor(str(repo), 2), stop_error=lambda: StopRequested(signal.SIGTERM), idle_after_s=0)
    yield opened
    opened.close()


def request(
    repo: Path, tmp_path: Path, step_id: int, worker: str, run: str = "exit 0", *, preemptible: bool = False
) -> StepRequest:
    spec = BisectSpec(repo=str(repo), good="HEAD~5", bad="HEAD", test=CommitTest(run=run))
    return step_request(spec,
        bisect_id=1, step_id=step_id, sha="HEAD", attempt=1, repo=str(repo), metric=spec.metric_spec(),
        log_path=str(tmp_path / f"step-{step_id}.log"), pin_worker=worker, preemptible=preemptible,
    )  # fmt: skip


def results_of(view: PoolView, count: int) -> list[StepResult]:
    """The view's next count results (each step reports once; a step of `sleep 60` ends only when cancelled)."""
    results: list[StepResult] = []
    while len(results) < count:
        results += view.poll(0.2)
    return results


def test_shares_give_every_view_one_slot_and_the_rest_by_priority(pool: SlotPool) -> None:
    pool.view(1, priority=0)
    assert pool.shares() == {ViewKey(1): 4}
    pool.view(2, priority=0)
    assert pool.shares() == {ViewKey(1): 2, ViewKey(2): 2}
    pool.view(3, priority=3)
    pool.view(4, priority=0)
    assert pool.shares() == {ViewKey(1): 1, ViewKey(2): 1, ViewKey(3): 1, ViewKey(4): 1}


def test_a_bisects_rerun_has_a_view_of_its_own_beside_its_jobs(pool: SlotPool) -> None:
    pool.view(1, priority=1)
    pool.view(1, priority=1, rerun=True)
    assert pool.shares() == {ViewKey(1): 2, ViewKey(1, rerun=True): 2}
    with pytest.raises(ExecutorError, match="the rerun of bisect 1 already has a view"):
        pool.view(1, rerun=True)


def test_with_more_views_than_slots_only_as_many_are_promised_one_jobs_first(pool: SlotPool) -> None:
    for bisect_id in (1, 2, 3):
        pool.view(bisect_id)
    pool.view(1, rerun=True)
    pool.view(2, priority=2, rerun=True)
    pool.view(3, rerun=True)
    assert pool.shares() == {
        ViewKey(1): 1, ViewKey(2): 1, ViewKey(3): 1,
        ViewKey(1, rerun=True): 0, ViewKey(2, rerun=True): 1, ViewKey(3, rerun=True): 0,
    }  # fmt: skip
    assert sum(pool.shares().values()) == pool.slots


def test_a_view_promised_no_slot_preempts_nobody_and_waits_for_one(pool: SlotPool, repo: Path, tmp_path: Path) -> None:
    first = pool.view(1)
    workers = first.free_workers()  # alone: it borrows all four
    for step_id, worker in enumerate(workers[:2], start=1):
        first.submit(request(repo, tmp_path, step_id, worker, run="sleep 60", preemptible=True))
    first.poll(0.0)
    second, third = pool.view(2), pool.view(3)
    second.submit(request(repo, tmp_path, 3, second.free_workers()[0], run="exit 0"))
    third.submit(request(repo, tmp_path, 4, third.free_workers()[0], run="sleep 60", preemptible=True))
    pool.view(2, rerun=True)  # promised the fourth slot: it came before
    rerun = pool.view(1, rerun=True)
    assert pool.shares()[rerun.key] == 0
    answers: list[list[str]] = []
    waiting = threading.Thread(target=lambda: answers.append(rerun.free_workers()))
    waiting.start()
    results_of(second, 1)
    assert waiting.is_alive()  # the second view's slot is free, but owed to it, and it is not idle (it just polled)
    second.close()  # its job ends: four views now, one slot each
    waiting.join()
    assert len(answers[0]) == 1
    assert first.poll(0.0) == []  # the first view's extra step was never preempted for the rerun
    assert pool.busy() == 3


def test_priority_takes_the_larger_part_of_the_spare_slots(pool: SlotPool) -> None:
    pool.view(1, priority=0)
    pool.view(2, priority=2)
    assert pool.shares() == {ViewKey(1): 1, ViewKey(2): 3}


def test_a_view_borrows_idle_slots_but_not_those_another_view_is_owed(
    pool: SlotPool, repo: Path, tmp_path: Path
) -> None:
    first, second = pool.view(1), pool.view(2)
    assert len(first.free_workers()) == 2  # second is owed its 2 while it holds none
    for step_id, worker in enumerate(first.free_workers(), start=1):
        first.submit(request(repo, tmp_path, step_id, worker, run="sleep 30"))
    taken = second.free_workers()
    assert len(taken) == 2
    assert first.free_workers() == []  # the second view's reservation stands until its next poll
    second.close()
    assert len(first.free_workers()) == 2  # nobody else is owed a slot: it may borrow them


def test_reserved_workers_are_not_handed_to_another_view(pool: SlotPool, repo: Path, tmp_path: Path) -> None:
    first, second = pool.view(1), pool.view(2)
    mine = first.free_workers()
    assert not set(mine) & set(second.free_workers())
    with pytest.raises(ExecutorError, match="reserved for another bisect"):
        second.submit(request(repo, tmp_path, 1, mine[0]))


def test_each_view_polls_only_its_own_results(pool: SlotPool, repo: Path, tmp_path: Path) -> None:
    first, second = pool.view(1), pool.view(2)
    first.submit(request(repo, tmp_path, 11, first.free_workers()[0]))
    second.submit(request(repo, tmp_path, 22, second.free_workers()[0], run="exit 1"))
    got: dict[int, list[int]] = {1: [], 2: []}
    for _ in range(200):
        got[1] += [r.step_id for r in first.poll(0.1)]
        got[2] += [r.step_id for r in second.poll(0.1)]
        if got[1] and got[2]:
            break
    assert got == {1: [11], 2: [22]}


def test_a_closed_view_cancels_its_steps_and_gives_their_slots_back(pool: SlotPool, repo: Path, tmp_path: Path) -> None:
    view = pool.view(1)
    for step_id, worker in enumerate(view.free_workers(), start=1):
        view.submit(request(repo, tmp_path, step_id, worker, run="sleep 60"))
    assert pool.busy() == 4
    view.close()
    other = pool.view(2)
    for _ in range(300):
        if pool.busy() == 0:
            break
        other.poll(0.1)
    assert pool.busy() == 0
    assert len(other.free_workers()) == 4


def test_stop_raises_in_the_coordinator_of_every_view(pool: SlotPool) -> None:
    view = pool.view(1)
    pool.stop()
    with pytest.raises(StopRequested):
        view.poll(0.0)
    with pytest.raises(StopRequested):
        pool.view(2)


def test_results_keep_their_verdicts(pool: SlotPool, repo: Path, tmp_path: Path) -> None:
    view = pool.view(1)
    view.submit(request(repo, tmp_path, 5, view.free_workers()[0], run="exit 1"))
    results: list[StepResult] = []
    while not results:
        results = view.poll(0.2)
    assert results[0].verdict is Verdict.BAD


def test_a_view_with_nothing_out_waits_for_its_first_slot_instead_of_seeing_none(
    pool: SlotPool, repo: Path, tmp_path: Path
) -> None:
    first = pool.view(1)
    for step_id, worker in enumerate(first.free_workers(), start=1):  # alone: it borrows all four
        first.submit(request(repo, tmp_path, step_id, worker, run="sleep 0.5"))
    second = pool.view(2)
    got = second.free_workers()  # returns once a borrowed slot is free, never with nothing
    assert len(got) >= 1
    assert not set(got) & set(first.free_workers())


def test_interrupt_ends_the_wait_of_a_cancelled_bisect(pool: SlotPool, repo: Path, tmp_path: Path) -> None:
    first = pool.view(1)
    for step_id, worker in enumerate(first.free_workers(), start=1):
        first.submit(request(repo, tmp_path, step_id, worker, run="sleep 60"))
    second = pool.view(2)
    answers: list[list[str]] = []
    waiting = threading.Thread(target=lambda: answers.append(second.free_workers()))
    waiting.start()
    pool.interrupt(2)
    waiting.join()
    assert answers == [[]]


def test_interrupting_only_a_rerun_leaves_its_bisects_job_a_worker(pool: SlotPool, repo: Path, tmp_path: Path) -> None:
    # An ended bisect's job may still be explaining its culprit through its view when its rerun is cancelled.
    job = pool.view(2)
    rerun = pool.view(2, rerun=True)
    pool.interrupt(2, rerun_only=True)
    assert rerun.free_workers() == []
    assert job.free_workers()


def test_a_view_holding_nothing_preempts_the_newest_speculative_step_of_the_view_most_over_its_share(
    pool: SlotPool, repo: Path, tmp_path: Path
) -> None:
    first = pool.view(1)
    workers = first.free_workers()  # alone: it borrows all four
    first.submit(request(repo, tmp_path, 1, workers[0], run="sleep 60", preemptible=True))
    first.submit(request(repo, tmp_path, 2, workers[1], run="sleep 60"))  # an endpoint check, say
    first.submit(request(repo, tmp_path, 3, workers[2], run="sleep 60", preemptible=True))
    first.poll(0.0)  # as its coordinator does after a round: the worker it left unused is no longer reserved
    second = pool.view(2)
    second.submit(request(repo, tmp_path, 4, second.free_workers()[0], run="sleep 60", preemptible=True))
    assert pool.busy() == 4
    third = pool.view(3)
    assert pool.shares() == {ViewKey(1): 2, ViewKey(2): 1, ViewKey(3): 1}
    # Step 4 is the newest, but it is the second view's only slot; step 3 is the first view's newest speculative one.
    got = third.free_workers()  # returns once the preempted step's slot is free (the others run for a minute)
    assert got == [workers[2]]
    [cancelled] = results_of(first, 1)
    assert cancelled.step_id == 3
    assert cancelled.verdict is Verdict.CANCELLED
    assert cancelled.detail.startswith(f"{PREEMPTED}: its slot went to bisect 3")
    assert pool.busy() == 3


def test_steps_not_marked_preemptible_are_never_preempted(pool: SlotPool, repo: Path, tmp_path: Path) -> None:
    first = pool.view(1)
    first_workers = first.free_workers()
    for step_id, worker in enumerate(first_workers, start=1):
        first.submit(request(repo, tmp_path, step_id, worker, run="sleep 60", preemptible=step_id == 1))
    first.poll(0.0)
    second = pool.view(2)
    assert second.free_workers() == [first_workers[0]]  # the one preemptible step, the oldest, gave its slot
    [cancelled] = results_of(first, 1)
    assert (cancelled.step_id, cancelled.verdict) == (1, Verdict.CANCELLED)  # not 4, the newest
    assert pool.busy() == 3  # the others run on


def test_a_view_closed_while_it_waits_for_a_slot_is_offered_none(repo: Path, tmp_path: Path) -> None:
    pool = SlotPool(InProcessExecutor(str(repo), 1), stop_error=lambda: StopRequested(signal.SIGTERM))
    try:
        job = pool.view(1)
        job.submit(request(repo, tmp_path, 1, job.free_workers()[0], run="sleep 60", preemptible=True))
        job.poll(0.0)
        rerun = pool.view(1, rerun=True)  # promised none: the job holds the one slot
        answers: list[object] = []

        def ask() -> None:
            try:
                answers.append(rerun.free_workers())
            except Exception as exc:  # what its coordinator would have seen
                answers.append(exc)

        waiting = threading.Thread(target=ask)
        waiting.start()
        rerun.close()  # by another thread, before or while it waits
        waiting.join()
        assert answers == [[]]
        assert job.poll(0.0) == []  # the job's step was not preempted for it
        assert pool.busy() == 1
    finally:
        pool.close()


def asked(view: PoolView) -> Callable[[], list[str]]:
    """view.free_workers() asked in a thread of its own (as its coordinator's); the call returns its answer."""
    answers: list[list[str]] = []
    thread = threading.Thread(target=lambda: answers.append(view.free_workers()))
    thread.start()

    def answer() -> list[str]:
        thread.join(WAIT_S)
        assert answers, "still waiting for a slot"
        return answers[0]

    return answer


def test_a_slot_owed_to_an_idle_view_is_lent_to_a_waiting_rerun_and_comes_back_when_its_step_ends(
    lending_pool: SlotPool, repo: Path, tmp_path: Path
) -> None:
    job, idle_job = lending_pool.view(1), lending_pool.view(2)  # the second job's coordinator is elsewhere
    job.submit(request(repo, tmp_path, 1, job.free_workers()[0], run="sleep 60", preemptible=True))
    job.poll(0.0)
    rerun = lending_pool.view(1, rerun=True)
    assert lending_pool.shares() == {ViewKey(1): 1, ViewKey(2): 1, ViewKey(1, rerun=True): 0}
    [lent] = asked(rerun)()
    gate = tmp_path / "gate"
    gate.touch()
    rerun.submit(request(repo, tmp_path, 2, lent, run=f"while [ -e {gate} ]; do sleep 0.05; done"))
    rerun.poll(0.0)
    owner_asks = asked(idle_job)  # holds none, none is free, and the rerun's step is not preemptible: it waits
    gate.unlink()
    assert owner_asks() == [lent]
    assert [r.step_id for r in results_of(rerun, 1)] == [2]
    assert job.poll(0.0) == []  # the job's step was never preempted


def test_a_slot_lent_to_a_job_is_taken_back_by_preemption_when_its_owner_asks(
    lending_pool: SlotPool, repo: Path, tmp_path: Path
) -> None:
    first, idle = lending_pool.view(1), lending_pool.view(2)
    workers = first.free_workers()
    assert len(workers) == 2  # its own and the idle view's
    for step_id, worker in enumerate(workers, start=1):
        first.submit(request(repo, tmp_path, step_id, worker, run="sleep 60", preemptible=True))
    first.poll(0.0)
    assert asked(idle)() == [workers[1]]  # the newest probe gave its slot back
    [cancelled] = results_of(first, 1)
    assert (cancelled.step_id, cancelled.verdict) == (2, Verdict.CANCELLED)
    assert cancelled.detail.startswith(f"{PREEMPTED}: its slot went to bisect 2")


class AskingWhileExplaining(SilentObserver):
    """Once the coordinator starts explaining its culprit, another view asks for a slot; what it got is kept, and
    its view closed (its coordinator is done), before the explanation goes on."""

    def __init__(self, other: PoolView) -> None:
        self.other = other
        self.lent: list[str] = []

    def note(self, message: str) -> None:
        if "now explaining it" in message:
            self.lent = asked(self.other)()
            self.other.close()


def test_a_bisect_explaining_its_culprit_reserves_no_worker_so_its_slot_is_lent(repo: Path, tmp_path: Path) -> None:
    """The search's last look for free workers reserved one; it goes back before the explanation, so the slot
    owed to the explaining job (idle meanwhile) is lent to a view that asks."""
    pool = SlotPool(InProcessExecutor(str(repo), 1), stop_error=lambda: StopRequested(signal.SIGTERM), idle_after_s=0)
    try:
        with Store.open(f"sqlite:///{tmp_path / 'bisect.db'}") as store:
            spec = BisectSpec(repo=str(repo), good="HEAD~6", bad="HEAD", test=CommitTest(run="bash test.sh"))
            bisect_id = prepare_bisect(store, spec)
            job = pool.view(bisect_id)
            observer = AskingWhileExplaining(pool.view(bisect_id + 1))
            found = Coordinator(store, lambda spec: job, observer=observer).resume(bisect_id)
        assert found.status is BisectStatus.FOUND
        assert observer.lent == job.worker_names()
    finally:
        pool.close()


def test_a_view_reports_the_process_groups_of_its_own_steps_alone(repo: Path, tmp_path: Path) -> None:
    """What a rerun over a pool view records for the next command to end, should the server die with its workers:
    the groups its own steps' commands lead on this host, with their leaders' start times, never another view's."""
    pool = SlotPool(LocalExecutor(str(repo), 2), stop_error=lambda: StopRequested(signal.SIGTERM))
    try:
        job, rerun = pool.view(1), pool.view(1, rerun=True)
        leaders = {step_id: tmp_path / f"leader-{step_id}" for step_id in (1, 2)}
        for view, step_id in ((job, 1), (rerun, 2)):
            held = f"echo $$ > {leaders[step_id]}.tmp && mv {leaders[step_id]}.tmp {leaders[step_id]}; exec sleep 600"
            view.submit(request(repo, tmp_path, step_id, view.free_workers()[0], held))
        deadline = time.monotonic() + WAIT_S
        while not (all(path.exists() for path in leaders.values()) and job.process_groups() and rerun.process_groups()):
            assert time.monotonic() < deadline, "the steps' tests never started, or their views never reported them"
            time.sleep(0.02)
        pids = {step_id: int(path.read_text()) for step_id, path in leaders.items()}
        assert job.process_groups() == [ProcessGroup(pids[1], str(process_start(pids[1])))]
        assert rerun.process_groups() == [ProcessGroup(pids[2], str(process_start(pids[2])))]
        assert rerun.process_groups([1]) == []
    finally:
        pool.close()
