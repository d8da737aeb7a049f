"""Executor.abandon, the watchdog's last resort for a step that never reports: the local executor kills the hung
worker process, its test with it, and the slot serves the next step."""

from __future__ import annotations

from pathlib import Path

from bisect_helpers import alive, wait_for
from synthetic import culprit_history
from worker_steps import results_of, step_request

from bisector.vocab.domain import ErrorKind, Verdict
from bisector.workers.local import LocalExecutor


def test_an_abandoned_step_takes_its_worker_and_test_down_and_the_slot_serves_again(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 4, 2)
    pid_file = tmp_path / "test.pid"
    with LocalExecutor(str(history.path), workers=1) as executor:
        worker_pid = executor.worker_pids()["local-0"]
        executor.submit(step_request(history, 1, 1, f"echo $$ > {pid_file}; sleep 600", tmp_path))
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() != "", what="the test to start")
        test_pid = int(pid_file.read_text())

        executor.abandon(1)
        (lost,) = results_of(executor, 1)
        assert (lost.step_id, lost.verdict, lost.error_kind) == (1, Verdict.ERROR, ErrorKind.WORKER_LOST)
        wait_for(lambda: not alive(test_pid), what="the abandoned test to be killed")
        assert executor.worker_pids()["local-0"] != worker_pid

        executor.submit(step_request(history, 2, 1, "bash test.sh", tmp_path))
        (after,) = results_of(executor, 1)
    assert (after.step_id, after.verdict) == (2, Verdict.GOOD)
