"""A step that never reports, and a harness that keeps failing: the coordinator's own safety nets.

The executor is the real in-process one (real worktrees, real test processes); a thin subclass loses chosen
results on the way back, as a hung worker or a full disk would, which a real worker cannot be made to do on cue.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from bisect_helpers import synthetic_spec
from synthetic import culprit_history

from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.runner.coordinator import HARNESS_PAUSE_AFTER, Coordinator
from bisector.runner.manual import MarkEffect, mark_commit
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus, ErrorKind, StepResult, Verdict
from bisector.workers.executor import Executor
from bisector.workers.inprocess import InProcessExecutor


class LosesResults(InProcessExecutor):
    """Drops the first `lose` results of one commit (a worker that never reports) and records what was abandoned."""

    def __init__(self, spec: BisectSpec, sha: str, lose: int = 1) -> None:
        super().__init__(spec.repo, spec.executor.workers)
        self.sha, self.lose = sha, lose
        self.abandoned: list[int] = []

    def poll(self, timeout_s: float) -> list[StepResult]:
        results = []
        for result in super().poll(timeout_s):
            if result.sha == self.sha and self.lose > 0:
                self.lose -= 1
                continue
            results.append(result)
        return results

    def abandon(self, step_id: int) -> None:
        self.abandoned.append(step_id)
        super().abandon(step_id)


class FullDisk(InProcessExecutor):
    """Every result comes back as the harness's disk-full error, as a worker whose log disk filled up reports it."""

    def __init__(self, spec: BisectSpec) -> None:
        super().__init__(spec.repo, spec.executor.workers)

    def poll(self, timeout_s: float) -> list[StepResult]:
        return [
            replace(result, verdict=Verdict.ERROR, error_kind=ErrorKind.DISK_FULL,
                    detail="disk full: no space left on /logs writing the step log", samples=())
            for result in super().poll(timeout_s)
        ]  # fmt: skip


def test_a_step_that_never_reports_is_given_up_on_and_tested_again(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 20, 13)
    # Both endpoints run first: the bad one is the step whose result is lost.
    spec = synthetic_spec(history.path, history.shas[0], "main", timeout_s=20.0, workers=2, verify_endpoints="first")
    executors: list[LosesResults] = []

    def factory(spec: BisectSpec) -> Executor:
        executors.append(LosesResults(spec, history.shas[-1]))
        return executors[-1]

    record = Coordinator(store, factory, poll_interval_s=0.05, watchdog_grace_s=1.0).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[13])
    bad_end = [s for s in store.steps(record.id) if s.sha == history.shas[-1]]
    assert bad_end[0].error_kind is ErrorKind.STALLED
    assert "no result 21 s after the step was sent (its timeout is 20 s)" in bad_end[0].detail
    assert bad_end[0].id in executors[0].abandoned
    assert any(s.verdict is Verdict.BAD for s in bad_end[1:])


def test_a_harness_that_keeps_failing_pauses_the_bisect_and_resume_carries_on(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 20, 13)
    spec = synthetic_spec(history.path, history.shas[0], "main", workers=2, max_attempts=2)
    paused = Coordinator(store, FullDisk, poll_interval_s=0.05).start(spec)
    assert paused.status is BisectStatus.PAUSED
    failures = re.match(r"paused: the test harness failed (\d+) times in a row, never the commits", paused.message)
    assert failures is not None, paused.message
    assert int(failures.group(1)) >= HARNESS_PAUSE_AFTER
    assert "disk_full: disk full: no space left on /logs" in paused.message
    assert paused.message.endswith("); fix it, then resume the bisect")  # each face says how (no command stored)
    assert "bisect resume" not in paused.message
    steps = store.steps(paused.id)
    assert steps
    assert all(s.error_kind is ErrorKind.DISK_FULL for s in steps if s.verdict is not Verdict.CANCELLED)

    resumed = Coordinator(store, make_executor, poll_interval_s=0.05).resume(paused.id)
    assert (resumed.status, resumed.first_bad) == (BisectStatus.FOUND, history.shas[13])


def test_a_mark_on_a_paused_bisect_is_said_to_wait_for_resume_which_takes_it_in(tmp_path: Path, store: Store):
    """No coordinator runs a paused bisect: the mark waits for `bisect resume`, never for one 'within a second'."""
    history = culprit_history(tmp_path / "repo", 20, 13)
    spec = synthetic_spec(history.path, history.shas[0], "main", workers=2, max_attempts=2)
    paused = Coordinator(store, FullDisk, poll_interval_s=0.05).start(spec)
    assert paused.status is BisectStatus.PAUSED

    marked = mark_commit(store, paused.id, history.shas[13], "good", who="alice")  # the test says bad: a person wins
    assert (marked.effect, marked.status, marked.reopened) == (MarkEffect.AT_RESUME, BisectStatus.PAUSED, False)
    assert marked.message == (
        f"bisect {paused.id} is paused: no coordinator runs it; `bisect resume {paused.id}` takes the verdict in"
    )
    assert store.get_bisect(paused.id).status is BisectStatus.PAUSED
    resumed = Coordinator(store, make_executor, poll_interval_s=0.05).resume(paused.id)
    assert (resumed.status, resumed.first_bad) == (BisectStatus.FOUND, history.shas[14])
