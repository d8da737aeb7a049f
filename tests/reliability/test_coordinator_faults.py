"""Faults around the coordinator, as an operator meets them: real coordinators in subprocesses, real stores, signals.

Each test names the fault it injects and checks what the tool promises for it (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from bisect_helpers import alive, cli_env, run_cli, start_cli, stored_rows, wait_for
from synthetic import culprit_history

pytestmark = pytest.mark.slow


def start_args(history, *extra: str) -> list[str]:
    return [
        "start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main",
        "--run", "bash test.sh", "--metric", "metric: ([0-9.]+)", "--expect", ">= 8", "--no-explain", *extra,
    ]  # fmt: skip


def running_steps(db: Path) -> int:
    rows = stored_rows(db, "select count(*) from steps where verdict is null")
    return int(rows[0][0]) if rows else 0


def test_two_stores_sharing_a_data_dir_keep_their_logs_apart(tmp_path: Path):
    """Fault: two bisects at once on one host, each with its own --db, one data dir. Ids restart in every store,
    so their step logs once shared paths and one read the other's metric."""
    first = culprit_history(tmp_path / "one", 30, 7, sleep_s=0.2)
    second = culprit_history(tmp_path / "two", 30, 23, sleep_s=0.2)
    dbs = tmp_path / "one.db", tmp_path / "two.db"
    coordinators = [
        start_cli(*start_args(history, "--workers", "2", "--format", "json"), db=db)
        for history, db in zip((first, second), dbs, strict=True)
    ]
    reports = []
    for coordinator in coordinators:
        out, err = coordinator.communicate(timeout=600)
        assert coordinator.returncode == 0, err
        reports.append(json.loads(out))
    assert reports[0]["first_bad"]["sha"] == first.shas[7]
    assert reports[1]["first_bad"]["sha"] == second.shas[23]
    logs = [{step["log_path"] for step in report["steps"]} for report in reports]
    assert logs[0].isdisjoint(logs[1])
    assert all(Path(path).is_file() for paths in logs for path in paths)


def test_a_second_coordinator_is_refused_while_the_first_lives_and_takes_over_once_it_died(tmp_path: Path):
    """Fault: `bisect resume` of a bisect whose coordinator is alive (two coordinators would fight over its steps),
    then kill -9 of that coordinator."""
    history = culprit_history(tmp_path / "repo", 60, 41)
    db = tmp_path / "b.db"
    first = start_cli(*start_args(history, "--workers", "2"), db=db, SYNTHETIC_SLEEP_S="2")
    wait_for(lambda: running_steps(db) > 0, what="the first coordinator's steps")
    refused = run_cli("resume", "1", db=db)
    assert refused.returncode == 2
    assert refused.stderr.startswith("bisect: error: bisect 1 is run by another coordinator (pid ")
    assert refused.stderr.count("\n") == 1
    assert running_steps(db) > 0, "the refused resume must not touch the live coordinator's steps"
    owner = stored_rows(db, "select owner from bisects")[0][0]
    assert f":{first.pid}:" in owner
    status = run_cli("status", "1", db=db)
    assert f"coordinator: pid {first.pid} on " in status.stdout, status.stdout

    os.killpg(first.pid, signal.SIGKILL)
    first.communicate(timeout=60)
    assert "coordinator: pid" in run_cli("status", "1", db=db).stdout  # the lease is there until someone takes over
    taken_over = run_cli("resume", "1", "--format", "json", env=cli_env(db, SYNTHETIC_SLEEP_S="0"))
    assert taken_over.returncode == 0, taken_over.stderr
    report = json.loads(taken_over.stdout)
    assert report["first_bad"]["sha"] == history.shas[41]
    assert stored_rows(db, "select owner, heartbeat from bisects") == [(None, None)]


def test_the_steps_of_a_killed_coordinator_cost_up_to_its_last_heartbeat_not_until_the_resume(tmp_path: Path) -> None:
    """Fault: kill -9 of the coordinator (its steps die with it), resumed an hour later. The steps it left running were
    stored as ending at the resume: the report's time on workers and GPU-seconds, and `bisect stats`' GPU-hours,
    counted the hour nothing ran."""
    history = culprit_history(tmp_path / "repo", 60, 41)
    db = tmp_path / "b.db"
    gpus = {"BISECT_GPUS": "0,1", "BISECT_GPU_LOCK_DIR": str(tmp_path / "gpu-locks")}
    first = start_cli(*start_args(history, "--workers", "2"), db=db, SYNTHETIC_SLEEP_S="600", **gpus)
    wait_for(lambda: running_steps(db) == 2, what="the first coordinator's steps")
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate(timeout=60)
    an_hour_earlier = "strftime('%Y-%m-%d %H:%M:%f', {}, '-1 hour')"  # as if the kill had come an hour ago
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        for table, column in (("bisects", "created"), ("bisects", "heartbeat"), ("steps", "started")):
            conn.execute(f"update {table} set {column} = {an_hour_earlier.format(column)}")
    last_heartbeat = stored_rows(db, "select heartbeat from bisects")[0][0]

    resumed = run_cli("resume", "1", "--format", "json", env=cli_env(db, SYNTHETIC_SLEEP_S="0", **gpus))
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["first_bad"]["sha"] == history.shas[41]
    left = [step for step in report["steps"] if step["error_kind"] == "interrupted"]
    assert len(left) == 2
    for step in left:
        assert step["gpus"], "a step's GPUs are stored as it is sent, so a killed one costs its GPU time"
        assert step["finished"] == max(step["started"], datetime.fromisoformat(last_heartbeat + "+00:00").isoformat())
    assert report["slot_seconds"] < 600, "the hour nothing ran is no time on workers"
    assert report["gpu_seconds"] < 600
    stats = json.loads(run_cli("stats", "--format", "json", db=db).stdout)
    assert stats["groups"][0]["gpu_hours"] == pytest.approx(report["gpu_seconds"] / 3600, abs=1e-6)


@pytest.mark.parametrize(("signum", "exit_code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_to_the_process_group_stops_every_test_and_stores_them_interrupted(
    tmp_path: Path, signum: int, exit_code: int
):
    """Fault: SIGTERM to the coordinator's process group (a CI runner, systemd, Kubernetes) or Ctrl-C. The tests run
    in sessions of their own, so a signal to the group does not reach them: the coordinator must stop them."""
    history = culprit_history(tmp_path / "repo", 60, 41)
    pids = tmp_path / "pids"
    pids.mkdir()
    db = tmp_path / "b.db"
    run = f"echo $$ > {pids}/$$; sleep 600; bash test.sh"
    coordinator = start_cli(*start_args(history, "--workers", "3", "--run", run), db=db)
    wait_for(lambda: len(list(pids.iterdir())) == 3, what="three tests to start")

    os.killpg(coordinator.pid, signum)
    _, err = coordinator.communicate(timeout=120)
    assert coordinator.returncode == exit_code, err
    lines = err.strip().splitlines()
    assert lines[-1] == (
        f"bisect 1: stopped by {signal.Signals(signum).name}; 3 running step(s) stored as interrupted; "
        "`bisect resume 1` continues"
    )
    assert "Traceback" not in err
    test_pids = [int(path.name) for path in pids.iterdir()]
    wait_for(lambda: not any(alive(pid) for pid in test_pids), timeout_s=60, what="the tests to be killed")
    assert running_steps(db) == 0
    kinds = stored_rows(db, "select error_kind from steps")
    assert kinds == [("interrupted",)] * 3
    report = json.loads(run_cli("report", "1", "--format", "json", db=db).stdout)
    logs = [Path(step["log_path"]) for step in report["steps"]]
    assert all(log.is_file() for log in logs)  # the report points at what each test wrote before it was stopped
    logs[0].unlink()  # what the test wrote is gone: the report says no log is stored, not a path found earlier
    shown = " ".join(run_cli("report", "1", db=db).stdout.split())
    assert "log: none stored (its coordinator stopped before the step reported)" in shown
    assert stored_rows(db, "select status, owner from bisects") == [("running", None)]


def test_a_coordinator_killed_while_explaining_leaves_the_explanation_to_resume(tmp_path: Path):
    """Fault: kill -9 of the coordinator while the culprit is being explained (its traced re-runs are running). The
    verdict is stored first; resume finishes the explanation instead of refusing a found bisect."""
    history = culprit_history(tmp_path / "repo", 30, 17)
    db = tmp_path / "b.db"
    slow_when_traced = 'if [ -n "$KERNELS_DISPATCH_TRACE" ] && [ -n "$SLOW_TRACE" ]; then sleep 600; fi; bash test.sh'
    args = [a for a in start_args(history, "--workers", "2", "--run", slow_when_traced) if a != "--no-explain"]
    coordinator = start_cli(*args, "--explain", "--trace-kernels", db=db, SLOW_TRACE="1")
    wait_for(
        lambda: bool(stored_rows(db, "select 1 from steps where purpose = 'trace' and verdict is null")),
        what="a traced re-run",
    )
    status, extra = stored_rows(db, "select status, extra from bisects")[0]
    assert status == "found"
    assert json.loads(extra)["analysis"] == "pending"
    os.killpg(coordinator.pid, signal.SIGKILL)
    coordinator.communicate(timeout=60)

    resumed = run_cli("resume", "1", "--format", "json", db=db)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["first_bad"]["sha"] == history.shas[17]
    assert json.loads(stored_rows(db, "select extra from bisects")[0][0])["analysis"] == "done"
    traces = [s for s in report["steps"] if s["purpose"] == "trace"]
    assert {s["error_kind"] for s in traces if s["verdict"] == "error"} == {"interrupted"}
    assert sorted(s["verdict"] for s in traces if s["verdict"] != "error") == ["bad", "good"]
    assert running_steps(db) == 0
    assert run_cli("resume", "1", db=db).returncode == 2  # explained now: nothing left to resume
