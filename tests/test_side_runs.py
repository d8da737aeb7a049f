"""SideRunner: traced re-runs, minimisation variants and `bisect rerun` on real worktrees and processes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from bisect_helpers import synthetic_spec
from synthetic import culprit_history

from bisector.db.store import Store
from bisector.runner.coordinator import prepare_bisect
from bisector.runner.observer import SilentObserver
from bisector.runner.side_runs import SideRunner
from bisector.vocab.domain import ErrorKind, SideRun, StepPurpose, Verdict
from bisector.vocab.errors import ExecutorError
from bisector.workers.inprocess import InProcessExecutor

# The first attempt of every run hits an infrastructure error; later attempts test the commit.
FLAKY_INFRA = 'if [ "$BISECT_ATTEMPT" = 1 ]; then echo "CUDA out of memory"; exit 1; fi; bash test.sh'


def test_a_side_run_hit_by_an_infrastructure_error_is_retried_on_another_worker(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 6, 3)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=FLAKY_INFRA, max_attempts=3)
    bisect_id = prepare_bisect(store, spec)
    with InProcessExecutor(str(history.path), workers=2) as executor:
        runner = SideRunner(store, executor, bisect_id, spec, lambda: datetime.now(UTC), SilentObserver())
        (result,) = runner.run([SideRun(history.shas[5], StepPurpose.RERUN, label="again")])
    assert result.verdict is Verdict.BAD
    steps = store.steps(bisect_id)
    assert [(s.attempt, s.verdict, s.error_kind) for s in steps] == [
        (1, Verdict.ERROR, ErrorKind.INFRA),
        (2, Verdict.BAD, None),
    ]
    assert steps[0].worker != steps[1].worker
    assert all(s.purpose is StepPurpose.RERUN for s in steps)


def test_a_side_run_stops_retrying_at_max_attempts(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 6, 3)
    always = 'echo "CUDA out of memory"; exit 1'
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=always, max_attempts=2)
    bisect_id = prepare_bisect(store, spec)
    with InProcessExecutor(str(history.path), workers=1) as executor:
        runner = SideRunner(store, executor, bisect_id, spec, lambda: datetime.now(UTC), SilentObserver())
        results = runner.run([SideRun(history.shas[1], StepPurpose.TRACE), SideRun(history.shas[4], StepPurpose.TRACE)])
    assert [(r.verdict, r.error_kind) for r in results] == [(Verdict.ERROR, ErrorKind.INFRA)] * 2
    assert sorted(s.attempt for s in store.steps(bisect_id)) == [1, 1, 2, 2]


def test_side_runs_keep_off_quarantined_workers(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 6, 3)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1])
    bisect_id = prepare_bisect(store, spec)
    store.update_extra(bisect_id, quarantined={"thread-0": "wrong answers on known commits"})
    runs = [SideRun(history.shas[i], StepPurpose.TRACE) for i in (0, 2, 3, 5)]
    with InProcessExecutor(str(history.path), workers=2) as executor:
        runner = SideRunner(store, executor, bisect_id, spec, lambda: datetime.now(UTC), SilentObserver())
        results = runner.run(runs)
    assert [r.verdict for r in results] == [Verdict.GOOD, Verdict.GOOD, Verdict.BAD, Verdict.BAD]
    assert {s.worker for s in store.steps(bisect_id)} == {"thread-1"}


def test_side_runs_refuse_when_every_worker_is_quarantined(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 6, 3)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1])
    bisect_id = prepare_bisect(store, spec)
    store.update_extra(bisect_id, quarantined={"thread-0": "wrong answers on known commits"})
    with InProcessExecutor(str(history.path), workers=1) as executor:
        runner = SideRunner(store, executor, bisect_id, spec, lambda: datetime.now(UTC), SilentObserver())
        with pytest.raises(ExecutorError, match="every worker is quarantined"):
            runner.run([SideRun(history.shas[2], StepPurpose.RERUN)])
    assert store.steps(bisect_id) == []
