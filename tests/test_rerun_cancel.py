"""`bisect cancel ID` against a local `bisect run-at --bisect ID` (Coordinator.rerun) in another process: real
repositories, real SQLite files, real coordinator and step processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from bisect_helpers import processes_with, run_cli, start_cli, stored_rows, wait_for
from synthetic import SyntheticHistory, culprit_history

EXIT_NO_CULPRIT = 3


@pytest.fixture
def held_run(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """A test command that waits while the file `hold` exists, then runs the history's test, and the script it runs
    (its path names the step's processes: the coordinator's own command line holds it too) and that file. A test
    that fails leaves no process waiting."""
    hold = tmp_path / "hold"
    script = tmp_path / "held-test.sh"
    script.write_text(f"while [ -e {hold} ]; do sleep 0.05; done\n")
    yield f"bash {script} && bash test.sh", script, hold
    hold.unlink(missing_ok=True)
    for pid in processes_with(str(script)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)


def start_args(history: SyntheticHistory, run: str) -> list[str]:
    return [
        "start", "--repo", str(history.path), "--good", history.shas[0][:10], "--bad", "main", "--run", run,
        "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", "--no-explain",
    ]  # fmt: skip


def rerun_steps(db: Path) -> list[tuple[str | None, str]]:
    return stored_rows(db, "select verdict, detail from steps where purpose = 'rerun' order by id")


def step_processes(script: Path, *but: int) -> list[int]:
    return [pid for pid in processes_with(str(script)) if pid not in but]


def wait_until_the_rerun_runs(db: Path, script: Path, rerun: subprocess.Popen[str], *but: int) -> None:
    def running() -> bool:
        assert rerun.poll() is None, rerun.communicate()
        return [verdict for verdict, _ in rerun_steps(db)][-1:] == [None] and bool(step_processes(script, *but))

    wait_for(running, what="the rerun's step to run")


def report(db: Path) -> dict[str, object]:
    done = run_cli("report", "1", "--format", "json", db=db)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def assert_cancelled_rerun(rerun: subprocess.Popen[str], db: Path, script: Path, sha: str) -> None:
    """The rerun process exited with one line saying so, its step is stopped and stored as cancelled."""
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == EXIT_NO_CULPRIT, (out, err)
    assert err.strip().splitlines()[-1] == (
        f"bisect 1: the rerun at {sha[:12]} was cancelled; 1 running step(s) stopped and stored as cancelled"
    )
    assert "Traceback" not in err
    assert out == ""
    wait_for(lambda: not step_processes(script), what="the step's processes to end")
    assert rerun_steps(db) == [("cancelled", "cancelled by the operator")]


def test_cancel_stops_the_local_rerun_of_an_ended_bisect_and_keeps_its_verdict(
    tmp_path: Path, held_run: tuple[str, Path, Path]
):
    history = culprit_history(tmp_path / "repo", 8, 5)
    db = tmp_path / "b.db"
    run, script, hold = held_run
    assert run_cli(*start_args(history, run), db=db).returncode == 0
    before = report(db)
    hold.touch()
    rerun = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_until_the_rerun_runs(db, script, rerun)

    cancelled = run_cli("cancel", "1", db=db)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"bisect 1: already found; its rerun at {history.shas[6][:12]} cancelled\n"

    assert_cancelled_rerun(rerun, db, script, history.shas[6])
    after = report(db)
    assert {k: after[k] for k in ("status", "first_bad", "last_good", "message")} == {
        k: before[k] for k in ("status", "first_bad", "last_good", "message")
    }
    assert [s for s in after["steps"] if s["purpose"] != "rerun"] == before["steps"]  # type: ignore[union-attr]
    again = run_cli("cancel", "1", db=db)  # nothing runs now: as for any ended bisect
    assert (again.returncode, again.stderr.strip()) == (2, "bisect: error: bisect 1 is already found")


def test_cancel_stops_a_running_bisect_and_its_local_rerun(tmp_path: Path, held_run: tuple[str, Path, Path]):
    history = culprit_history(tmp_path / "repo", 8, 5)
    db = tmp_path / "b.db"
    run, script, hold = held_run
    hold.touch()
    coordinator = start_cli(*start_args(history, run), db=db)
    wait_for(lambda: bool(step_processes(script, coordinator.pid)), what="the bisect's steps to run")
    rerun = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_until_the_rerun_runs(db, script, rerun, coordinator.pid)

    cancelled = run_cli("cancel", "1", db=db)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"bisect 1: cancelled; its rerun at {history.shas[6][:12]} cancelled\n"

    coordinator.communicate(timeout=120)
    assert coordinator.returncode == EXIT_NO_CULPRIT
    assert_cancelled_rerun(rerun, db, script, history.shas[6])
    assert report(db)["status"] == "cancelled"
    search = stored_rows(db, "select verdict from steps where purpose != 'rerun'")
    assert search
    assert all(verdict is not None for (verdict,) in search)


def test_cancel_counts_no_rerun_that_ended_or_was_killed(tmp_path: Path, held_run: tuple[str, Path, Path]):
    """A rerun that finished, and one killed by SIGKILL (it could not remove its entry): neither runs, so a cancel
    of the ended bisect is refused as for any ended bisect."""
    history = culprit_history(tmp_path / "repo", 8, 5)
    db = tmp_path / "b.db"
    run, script, hold = held_run
    assert run_cli(*start_args(history, run), db=db).returncode == 0
    assert run_cli("run-at", "--bisect", "1", history.shas[6], db=db).returncode == 0
    hold.touch()
    rerun = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_until_the_rerun_runs(db, script, rerun)
    os.killpg(rerun.pid, signal.SIGKILL)  # the rerun and its step
    rerun.communicate()

    refused = run_cli("cancel", "1", db=db)
    assert (refused.returncode, refused.stderr.strip()) == (2, "bisect: error: bisect 1 is already found")
    assert report(db)["status"] == "found"
