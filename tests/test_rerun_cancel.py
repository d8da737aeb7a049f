"""`bisect cancel ID` against a local `bisect run-at --bisect ID` (Coordinator.rerun) in another process: real
repositories, real SQLite files, real coordinator and step processes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bisect_helpers import cli_env, processes_with, run_cli, start_cli, stored_rows, synthetic_spec, wait_for
from cgroup_helpers import Wrap, no_step_cgroups
from synthetic import SyntheticHistory, culprit_history

from bisector.db.store import Store
from bisector.runner.coordinator import Coordinator, cancel_bisect, prepare_bisect
from bisector.runner.ownership import LEASE_TTL_S
from bisector.runner.reruns import RerunRegistration, end_dead_reruns, running_rerun_commits
from bisector.runner.side_runs import SideRunsCancelledError
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus
from bisector.vocab.errors import StateError
from bisector.vocab.metric import MetricSpec
from bisector.vocab.processes import ProcessGroup, process_start
from bisector.workers.local import LocalExecutor
from bisector.workers.step_request import StepRequest

EXIT_NO_CULPRIT = 3
__all__ = ["no_step_cgroups"]  # a fixture, used by name


@dataclass(frozen=True)
class HeldTest:
    """A test command that waits while the file `hold` exists, then runs the history's test. Each step's waiting
    shell writes its pid to started/<step id>; the script's path is in the command line of every process of a step
    (and in the coordinator's, whose --run names it)."""

    root: Path

    @property
    def script(self) -> Path:
        return self.root / "held-test.sh"

    @property
    def hold(self) -> Path:
        return self.root / "hold"

    @property
    def started(self) -> Path:
        return self.root / "started"

    @property
    def run(self) -> str:
        return f"bash {self.script} && bash test.sh"

    def step_pid(self, step_id: int) -> int | None:
        marker = self.started / str(step_id)
        return int(marker.read_text()) if marker.exists() and marker.read_text().strip() else None

    def processes(self) -> list[int]:
        return processes_with(str(self.script))


@pytest.fixture
def held(tmp_path: Path) -> Iterator[HeldTest]:
    """A HeldTest; a test that fails leaves no process waiting."""
    test = HeldTest(tmp_path)
    test.started.mkdir()
    test.script.write_text(
        f"echo $$ > {test.started}/$BISECT_STEP_ID.tmp && mv {test.started}/$BISECT_STEP_ID.tmp "
        f"{test.started}/$BISECT_STEP_ID\nwhile [ -e {test.hold} ]; do sleep 0.05; done\n"
    )
    yield test
    test.hold.unlink(missing_ok=True)
    for pid in test.processes():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)


def start_args(history: SyntheticHistory, run: str) -> list[str]:
    return [
        "start", "--repo", str(history.path), "--good", history.shas[0][:10], "--bad", "main", "--run", run,
        "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", "--no-explain",
    ]  # fmt: skip


def rerun_steps(db: Path) -> list[tuple[int, str | None, str]]:
    return stored_rows(db, "select id, verdict, detail from steps where purpose = 'rerun' order by id")


def wait_for_the_reruns_test(db: Path, held: HeldTest, rerun: subprocess.Popen[str]) -> None:
    """Until the rerun's running step's test waits (its shell is alive)."""

    def waiting() -> bool:
        assert rerun.poll() is None, rerun.communicate()
        last = rerun_steps(db)[-1:]
        return bool(last) and last[0][1] is None and held.step_pid(last[0][0]) is not None

    wait_for(waiting, what="the rerun's test to run")
    assert held.step_pid(rerun_steps(db)[-1][0]) in held.processes()


def report(db: Path) -> dict[str, Any]:
    done = run_cli("report", "1", "--format", "json", db=db)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def assert_cancelled_rerun(rerun: subprocess.Popen[str], db: Path, held: HeldTest, sha: str) -> None:
    """The rerun process exited with one line saying so; its step's processes are gone and it is stored cancelled."""
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == EXIT_NO_CULPRIT, (out, err)
    assert err.strip().splitlines()[-1] == (
        f"bisect 1: the rerun at {sha[:12]} was cancelled; 1 running step(s) stopped and stored as cancelled"
    )
    assert "Traceback" not in err
    assert out == ""
    wait_for(lambda: not held.processes(), what="every step's processes to end")
    assert [(verdict, detail) for _, verdict, detail in rerun_steps(db)] == [("cancelled", "cancelled by the operator")]


def found_bisect(tmp_path: Path, held: HeldTest) -> tuple[SyntheticHistory, Path]:
    """Bisect 1 of a fresh store, found (its tests not held yet): the history and the store."""
    history = culprit_history(tmp_path / "repo", 8, 5)
    db = tmp_path / "b.db"
    assert run_cli(*start_args(history, held.run), db=db).returncode == 0
    return history, db


def test_cancel_stops_the_local_rerun_of_an_ended_bisect_and_keeps_its_verdict(tmp_path: Path, held: HeldTest):
    history, db = found_bisect(tmp_path, held)
    before = report(db)
    held.hold.touch()
    rerun = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_for_the_reruns_test(db, held, rerun)

    cancelled = run_cli("cancel", "1", db=db)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"bisect 1: already found; its rerun at {history.shas[6][:12]} cancelled\n"

    assert_cancelled_rerun(rerun, db, held, history.shas[6])
    after = report(db)
    kept = ("status", "first_bad", "last_good", "message", "finished")
    assert {k: after[k] for k in kept} == {k: before[k] for k in kept}
    assert [s for s in after["steps"] if s["purpose"] != "rerun"] == before["steps"]
    again = run_cli("cancel", "1", db=db)  # nothing runs now: as for any ended bisect
    assert (again.returncode, again.stderr.strip()) == (2, "bisect: error: bisect 1 is already found")


def test_a_cancel_names_a_rerun_still_running_when_it_stops_waiting_asked_to_stop(tmp_path: Path, held: HeldTest):
    """A rerun that has not ended when the cancel's wait ends (frozen by SIGSTOP; `--wait 0`) is named asked to
    stop, so that the user knows a stop is pending; it stops once it runs again."""
    history, db = found_bisect(tmp_path, held)
    held.hold.touch()
    rerun = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_for_the_reruns_test(db, held, rerun)
    os.kill(rerun.pid, signal.SIGSTOP)
    try:
        cancelled = run_cli("cancel", "1", "--wait", "0", db=db)
    finally:
        os.kill(rerun.pid, signal.SIGCONT)
    assert cancelled.returncode == 0, cancelled.stderr
    assert (
        cancelled.stdout
        == f"bisect 1: already found; its rerun at {history.shas[6][:12]} asked to stop (still running)\n"
    )
    assert_cancelled_rerun(rerun, db, held, history.shas[6])


def a_running_bisect_and_its_rerun(
    tmp_path: Path, held: HeldTest
) -> tuple[SyntheticHistory, Path, subprocess.Popen[str], subprocess.Popen[str]]:
    """A `bisect start` whose tests are held, and a `run-at --bisect 1` beside it whose test is running."""
    history = culprit_history(tmp_path / "repo", 8, 5)
    db = tmp_path / "b.db"
    held.hold.touch()
    coordinator = start_cli(*start_args(history, held.run), db=db)
    wait_for(lambda: any(held.started.iterdir()), what="the bisect's tests to run")
    rerun = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_for_the_reruns_test(db, held, rerun)
    return history, db, coordinator, rerun


def test_cancel_stops_a_running_bisect_and_its_local_rerun(tmp_path: Path, held: HeldTest):
    history, db, coordinator, rerun = a_running_bisect_and_its_rerun(tmp_path, held)

    cancelled = run_cli("cancel", "1", db=db)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"bisect 1: cancelled; its rerun at {history.shas[6][:12]} cancelled\n"

    coordinator.communicate(timeout=120)
    assert coordinator.returncode == EXIT_NO_CULPRIT
    assert_cancelled_rerun(rerun, db, held, history.shas[6])
    assert report(db)["status"] == "cancelled"
    search = stored_rows(db, "select verdict from steps where purpose != 'rerun'")
    assert search
    assert all(verdict is not None for (verdict,) in search)


def test_cancel_counts_no_rerun_that_ended_or_was_killed(tmp_path: Path, held: HeldTest):
    """A rerun that finished, and one killed by SIGKILL (it could not remove its entry): neither runs, so a cancel
    of the ended bisect is refused as for any ended bisect."""
    history, db = found_bisect(tmp_path, held)
    assert run_cli("run-at", "--bisect", "1", history.shas[6], db=db).returncode == 0
    held.hold.touch()
    rerun = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_for_the_reruns_test(db, held, rerun)
    os.killpg(rerun.pid, signal.SIGKILL)  # the rerun's own process group; its step is left to the fixture
    rerun.communicate()

    refused = run_cli("cancel", "1", db=db)
    assert (refused.returncode, refused.stderr.strip()) == (2, "bisect: error: bisect 1 is already found")
    assert report(db)["status"] == "found"


def coordinator_steps(db: Path) -> list[tuple[str | None, str | None]]:
    return stored_rows(db, "select verdict, error_kind from steps where purpose != 'rerun' order by id")


@pytest.mark.parametrize("how", ["stop-signal", "resume"])
def test_a_coordinator_that_stops_or_resumes_leaves_a_running_reruns_steps_to_it(
    tmp_path: Path, held: HeldTest, how: str
):
    """The coordinator's own running steps are stored as interrupted (at a stop signal, or by `bisect resume` after
    a kill), never those of a `run-at --bisect` running beside it: that rerun ends with its step's verdict."""
    history, db, coordinator, rerun = a_running_bisect_and_its_rerun(tmp_path, held)
    resumed = None
    if how == "stop-signal":
        os.killpg(coordinator.pid, signal.SIGTERM)
        _, err = coordinator.communicate(timeout=120)
        assert coordinator.returncode == 128 + signal.SIGTERM, err
    else:
        os.killpg(coordinator.pid, signal.SIGKILL)  # its steps' tests wait on in sessions of their own
        coordinator.communicate()
        resumed = start_cli("resume", "1", db=db)
        wait_for(lambda: ("error", "interrupted") in coordinator_steps(db), what="resume to re-queue the killed steps")
    assert [verdict for _, verdict, _ in rerun_steps(db)] == [None]

    held.hold.unlink()
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, (out, err)
    assert [verdict for _, verdict, _ in rerun_steps(db)] == ["bad"]
    if resumed is not None:
        _, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, err
        assert report(db)["first_bad"]["sha"] == history.shas[5]


def rerun_entries(db: Path, bisect_id: int = 1) -> dict[str, dict[str, Any]]:
    [(extra,)] = stored_rows(db, f"select extra from bisects where id = {bisect_id}")
    return dict(json.loads(extra).get("reruns", {}))


def killed_rerun(tmp_path: Path, held: HeldTest, wrap: Wrap = list) -> tuple[Path, SyntheticHistory]:
    """A found bisect whose `run-at --bisect` (its argv made by wrap) was killed by SIGKILL while its step's test
    waited: its step and its entry in the bisect's record are left stored as running."""
    history, db = found_bisect(tmp_path, held)
    held.hold.touch()
    rerun = start_cli("run-at", "--bisect", "1", history.shas[6], db=db, wrap=wrap)
    wait_for_the_reruns_test(db, held, rerun)
    step_group = os.getpgid(held.step_pid(rerun_steps(db)[-1][0]) or 0)
    wait_for(
        lambda: any(group[0] == step_group for e in rerun_entries(db).values() for group in e.get("groups", [])),
        what="the rerun to record its step's process group",
    )
    os.killpg(rerun.pid, signal.SIGKILL)  # the rerun's own process group: its step's group runs on
    rerun.communicate()
    assert [verdict for _, verdict, _ in rerun_steps(db)] == [None]
    assert rerun_entries(db)
    return db, history


DIED = ("error", "interrupted", "the `run-at --bisect` process running it died")


@pytest.mark.parametrize(
    ("command", "exit_code"), [("status", 0), ("cancel", 2), ("resume", 2), ("run-at", 0)]
)  # fmt: skip
def test_the_steps_of_a_rerun_killed_on_this_host_are_stored_interrupted_by_the_next_command(
    tmp_path: Path, held: HeldTest, command: str, exit_code: int
):
    """Not a verdict, not an infrastructure error to retry: the step's process is gone with its rerun."""
    db, history = killed_rerun(tmp_path, held)
    held.hold.unlink()  # the next rerun's test runs at once
    args = ["run-at", "--bisect", "1", history.shas[6]] if command == "run-at" else [command, "1"]
    done = run_cli(*args, db=db)
    assert done.returncode == exit_code, done.stderr
    assert "Traceback" not in done.stderr
    steps = stored_rows(db, "select verdict, error_kind, detail from steps where purpose = 'rerun' order by id")
    assert steps[0] == DIED
    assert [verdict for verdict, _, _ in steps[1:]] == (["bad"] if command == "run-at" else [])
    assert rerun_entries(db) == {}
    assert report(db)["status"] == "found"


def test_the_next_command_stops_the_processes_of_a_killed_rerun_s_step(
    tmp_path: Path, held: HeldTest, no_step_cgroups: Wrap
):
    """The step's test, in a session of its own, outlives its killed rerun (holding a GPU): the command that stores
    the step as interrupted ends its process group too. The rerun runs where its step gets no cgroup, which the
    sweep of a dead worker's cgroup by a step beside it (another test) would end first."""
    db, _ = killed_rerun(tmp_path, held, no_step_cgroups)
    assert held.processes()
    done = run_cli("status", "1", db=db)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not held.processes(), what="the killed rerun's step's processes to end")
    assert [(verdict, detail) for _, verdict, detail in rerun_steps(db)] == [(DIED[0], DIED[2])]


def test_a_dead_rerun_s_recorded_group_is_ended_only_while_its_leader_is_the_recorded_process(tmp_path: Path):
    """A group whose leader's start time differs from the recorded one (its pid reused) is not the rerun's: left
    alone. One whose leader is the recorded process is ended."""
    leaders = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2)]
    try:
        ours, reused = leaders
        wait_for(lambda: all(process_start(p.pid) for p in leaders), what="the sleepers to start")
        dead_owner = subprocess.Popen(["true"])
        dead_owner.wait()
        entry = {
            "owner": f"{socket.gethostname()}:{dead_owner.pid}:1", "sha": "d" * 40,
            "heartbeat": datetime.now(UTC).isoformat(),
            "groups": [[ours.pid, process_start(ours.pid)], [reused.pid, "1"]],
        }  # fmt: skip
        with Store.open(f"sqlite:///{tmp_path / 'b.db'}") as store:
            bisect_id = store.create_bisect(str(tmp_path), "a" * 40, "d" * 40, {}, datetime.now(UTC))
            store.update_extra(bisect_id, reruns={"token": entry})
            end_dead_reruns(store, bisect_id, datetime.now(UTC))
            assert "reruns" not in store.get_bisect(bisect_id).extra
        assert ours.wait(timeout=60) == -signal.SIGTERM
        assert reused.poll() is None
    finally:
        for leader in leaders:
            leader.kill()
            leader.wait()


def test_a_step_s_process_group_is_reported_with_its_leader_s_start_time_read_by_its_worker(
    tmp_path: Path, held: HeldTest
) -> None:
    """The worker reads the leader's start time as it starts it (before it can be reaped and its pid reused), and
    the executor reports that pair: what a rerun records is the process's own."""
    history = culprit_history(tmp_path / "repo", 2, 1)
    held.hold.touch()
    step = StepRequest(
        step_id=1, bisect_id=1, sha=history.shas[1], attempt=1, repo=str(history.path), run_cmd=held.run,
        metric=MetricSpec(), log_path=str(tmp_path / "step-1.log"), timeout_s=600.0,
    )  # fmt: skip
    with LocalExecutor(str(history.path), workers=1) as executor:
        executor.submit(step)
        wait_for(lambda: held.step_pid(1) is not None, what="the step's test to run")
        wait_for(lambda: executor.poll(0) == [] and bool(executor.process_groups()), what="the step's announcement")
        [group] = executor.process_groups()
        assert tuple(group) == (os.getpgid(held.step_pid(1) or 0), process_start(group.pgid))
        held.hold.unlink()


def a_sleeper_in_a_session_of_its_own() -> subprocess.Popen[bytes]:
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    wait_for(lambda: process_start(sleeper.pid) is not None, what="the sleeper to start")
    return sleeper


def test_a_rerun_records_its_groups_start_times_as_reported_not_as_read_later(tmp_path: Path) -> None:
    """A step's leader that exited and whose pid another process reused before the rerun recorded it: the entry
    keeps the leader's start time as its worker reported it, so the rerun's reaper never ends the process now at
    that pid."""
    stranger = a_sleeper_in_a_session_of_its_own()
    leader = ProcessGroup(stranger.pid, str(int(process_start(stranger.pid) or 0) - 1))  # it started earlier
    try:
        sha = "d" * 40
        with Store.open(f"sqlite:///{tmp_path / 'b.db'}") as store:
            bisect_id = store.create_bisect(str(tmp_path), "a" * 40, sha, {}, datetime.now(UTC))
            with RerunRegistration(store, bisect_id, sha) as registration:
                registration.record_groups([leader])
                [entry] = rerun_entries(tmp_path / "b.db", bisect_id).values()
                assert entry["groups"] == [list(leader)]
                gone_by_its_heartbeat = datetime.now(UTC) + timedelta(seconds=2 * LEASE_TTL_S)
                end_dead_reruns(store, bisect_id, gone_by_its_heartbeat)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


class StoreKilledAtTheTransaction(Store):
    """A real SQLite store whose process is killed as it begins end_dead_reruns' transaction: nothing is written."""

    def interrupt_reruns(self, *args: Any, **kwargs: Any) -> int:
        raise KeyboardInterrupt


def test_a_command_killed_as_it_ends_a_dead_rerun_leaves_its_entry_or_no_group_running(tmp_path: Path) -> None:
    """The groups of a rerun whose process is gone from this host are ended before its entry is removed: a command
    killed between the two leaves the entry (the next one ends the rest) and no group running."""
    leader = a_sleeper_in_a_session_of_its_own()
    try:
        dead_owner = subprocess.Popen(["true"])
        dead_owner.wait()
        entry = {
            "owner": f"{socket.gethostname()}:{dead_owner.pid}:1", "sha": "d" * 40,
            "heartbeat": datetime.now(UTC).isoformat(), "groups": [[leader.pid, process_start(leader.pid)]],
        }  # fmt: skip
        url = f"sqlite:///{tmp_path / 'b.db'}"
        with Store.open(url) as store:
            bisect_id = store.create_bisect(str(tmp_path), "a" * 40, "d" * 40, {}, datetime.now(UTC))
            store.update_extra(bisect_id, reruns={"token": entry})
        with StoreKilledAtTheTransaction.open(url) as killed, pytest.raises(KeyboardInterrupt):
            end_dead_reruns(killed, bisect_id, datetime.now(UTC))
        assert rerun_entries(tmp_path / "b.db", bisect_id) == {"token": entry}
        assert leader.wait(timeout=60) == -signal.SIGTERM
    finally:
        leader.kill()
        leader.wait()


def move_to_another_host(db: Path, heartbeat: datetime) -> dict[str, dict[str, str]]:
    """Rewrite the bisect's one rerun entry to name a process of another host, last seen at heartbeat; the entries."""
    [entry] = rerun_entries(db).values()
    _, pid, started = entry["owner"].rsplit(":", 2)
    return change_rerun_entry(db, owner=f"another-host:{pid}:{started}", heartbeat=heartbeat.isoformat())


def change_rerun_entry(db: Path, **fields: str) -> dict[str, dict[str, str]]:
    """Rewrite these fields of the bisect's one rerun entry; the entries."""
    [(token, entry)] = rerun_entries(db).items()
    changed = {token: {**entry, **fields}}
    [(extra,)] = stored_rows(db, "select extra from bisects where id = 1")
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(
            "update bisects set extra = ? where id = 1", (json.dumps({**json.loads(extra), "reruns": changed}),)
        )
    return changed


def test_the_steps_of_a_killed_rerun_cost_up_to_its_last_heartbeat_not_until_the_next_command(
    tmp_path: Path, held: HeldTest
):
    """Fault: kill -9 of a `run-at --bisect` while its step runs, the next command long after. The step was stored as
    ending at that command: the report's time on workers (and the dashboard's slot-seconds) counted the time after
    its rerun died. The report of the store not written yet shows the end that the next command stores."""
    db, _ = killed_rerun(tmp_path, held)
    an_hour_earlier = "strftime('%Y-%m-%d %H:%M:%f', started, '-1 hour')"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(f"update steps set started = {an_hour_earlier} where purpose = 'rerun'")
    [entry] = rerun_entries(db).values()
    last_heartbeat = datetime.fromisoformat(entry["heartbeat"]) - timedelta(minutes=30)  # it beat for half an hour
    change_rerun_entry(db, heartbeat=last_heartbeat.isoformat())

    def rerun_step() -> dict[str, Any]:
        [step] = [step for step in report(db)["steps"] if step["purpose"] == "rerun"]
        assert (step["verdict"], step["error_kind"]) == ("error", "interrupted")
        assert datetime.fromisoformat(step["started"]) < last_heartbeat
        assert datetime.fromisoformat(step["finished"]) == last_heartbeat
        return step

    shown = rerun_step()  # a view: nothing is written yet
    assert [verdict for _, verdict, _ in rerun_steps(db)] == [None]
    assert run_cli("status", "1", db=db).returncode == 0
    assert [verdict for _, verdict, _ in rerun_steps(db)] == ["error"]
    assert rerun_step() == shown
    assert report(db)["slot_seconds"] < 3600, "the half hour after the rerun died is no time on workers"


def test_a_rerun_of_another_host_with_a_fresh_heartbeat_is_left_as_it_is(tmp_path: Path, held: HeldTest):
    """Whether a process of another host lives cannot be told from here: while its heartbeat is fresh, its rerun's
    steps stay running."""
    db, _ = killed_rerun(tmp_path, held)
    elsewhere = move_to_another_host(db, datetime.now(UTC))
    assert run_cli("status", "1", db=db).returncode == 0
    assert [verdict for _, verdict, _ in rerun_steps(db)] == [None]
    assert rerun_entries(db) == elsewhere


@pytest.mark.parametrize(("command", "exit_code"), [("status", 0), ("cancel", 2)])
def test_a_rerun_of_another_host_whose_heartbeat_is_stale_is_ended_by_the_next_command(
    tmp_path: Path, held: HeldTest, command: str, exit_code: int
):
    """Its heartbeat older than the lease's TTL: gone, as a coordinator would be. Its steps are stored interrupted
    and its entry removed; the cancel does not wait for it and, stopping no rerun, is refused as for any ended
    bisect."""
    db, _ = killed_rerun(tmp_path, held)
    move_to_another_host(db, datetime.now(UTC) - timedelta(seconds=2 * LEASE_TTL_S))
    done = run_cli(command, "1", db=db)
    assert done.returncode == exit_code, done.stderr
    assert "Traceback" not in done.stderr
    steps = stored_rows(db, "select verdict, error_kind, detail from steps where purpose = 'rerun' order by id")
    assert steps == [DIED]
    assert rerun_entries(db) == {}
    assert report(db)["status"] == "found"


def test_a_running_rerun_renews_its_heartbeat_until_it_leaves(tmp_path: Path):
    """The entry's heartbeat advances while the rerun runs (a cancel keeps waiting for it), and the entry goes
    with the rerun."""
    sha = "d" * 40
    with Store.open(f"sqlite:///{tmp_path / 'b.db'}") as store:
        bisect_id = store.create_bisect(str(tmp_path), "a" * 40, sha, {}, datetime.now(UTC))

        def heartbeat() -> datetime:
            [entry] = store.get_bisect(bisect_id).extra["reruns"].values()
            return datetime.fromisoformat(entry["heartbeat"])

        with RerunRegistration(store, bisect_id, sha, heartbeat_s=0.05):
            first = heartbeat()
            wait_for(lambda: heartbeat() > first, what="the rerun's heartbeat to advance")
            assert running_rerun_commits(store.get_bisect(bisect_id).extra, datetime.now(UTC)) == (sha,)
        assert "reruns" not in store.get_bisect(bisect_id).extra


def test_status_on_a_read_only_store_shows_a_killed_rerun_s_steps_as_stored(tmp_path: Path, held: HeldTest):
    """Ending them is a write: a store that cannot be written is shown as it is, with no error."""
    db, _ = killed_rerun(tmp_path, held)
    # root writes through file modes: drop that capability so the modes hold, as for any other user
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"] if os.geteuid() == 0 else []
    if drop and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only file cannot be made")
    db.chmod(0o444)
    try:
        command = [*drop, sys.executable, "-m", "bisector", "status", "1", "--db", str(db)]
        done = subprocess.run(command, env=cli_env(), capture_output=True, text=True, timeout=120)
    finally:
        db.chmod(0o644)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert [verdict for _, verdict, _ in rerun_steps(db)] == [None]
    assert rerun_entries(db)


def test_a_cancel_ends_a_dead_rerun_kept_beside_a_living_one_at_its_commit(tmp_path: Path, held: HeldTest):
    """Two reruns at one commit, the second killed by SIGKILL: its entry is kept while the first runs (their steps
    cannot be told apart). The cancel stops the first and then stores the dead one's step as interrupted: no rerun
    step stays running, no entry is left."""
    history, db = found_bisect(tmp_path, held)
    held.hold.touch()
    living = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_for_the_reruns_test(db, held, living)
    killed = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_for(lambda: len(rerun_steps(db)) == 2, what="the second rerun's step")
    wait_for_the_reruns_test(db, held, killed)
    os.killpg(killed.pid, signal.SIGKILL)  # the rerun's own process group; its step is left to the fixture
    killed.communicate()

    cancelled = run_cli("cancel", "1", db=db)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"bisect 1: already found; its rerun at {history.shas[6][:12]} cancelled\n"
    out, err = living.communicate(timeout=120)
    assert living.returncode == EXIT_NO_CULPRIT, (out, err)
    steps = stored_rows(db, "select verdict, error_kind, detail from steps where purpose = 'rerun' order by id")
    assert steps == [("cancelled", None, "cancelled by the operator"), DIED]
    assert rerun_entries(db) == {}


@pytest.mark.parametrize("ended", ["by itself", "by the cancel"])
def test_a_cancel_names_a_rerun_only_if_the_cancel_stopped_it(tmp_path: Path, ended: str):
    """The race: the cancel revokes a rerun's entry after the rerun stored its last result but before it left its
    registration. The rerun then ends by itself, and the cancel (waiting for it) does not name it; one that stops
    because of the cancel is named."""
    sha = "d" * 40
    with Store.open(f"sqlite:///{tmp_path / 'b.db'}") as store, ThreadPoolExecutor(1) as threads:
        bisect_id = store.create_bisect(str(tmp_path), "a" * 40, sha, {}, datetime.now(UTC))
        store.set_status(bisect_id, BisectStatus.FOUND)
        registration = RerunRegistration(store, bisect_id, sha)
        with contextlib.suppress(SideRunsCancelledError), registration:
            cancelling = threads.submit(cancel_bisect, store, bisect_id)
            wait_for(registration.revoked, what="the cancel to revoke the rerun")
            if ended == "by the cancel":
                raise SideRunsCancelledError("the rerun was cancelled")
        if ended == "by itself":
            with pytest.raises(StateError, match=f"bisect {bisect_id} is already found"):
                cancelling.result()
        else:
            assert cancelling.result().reruns == (sha,)
        assert "reruns" not in store.get_bisect(bisect_id).extra


def test_a_rerun_of_an_in_memory_store_is_judged_by_its_process_alone(tmp_path: Path):
    """No other process reads an in-memory store, so its reruns write no heartbeat (no second thread on its one
    connection): a living one is never ended, however much time passes."""
    sha = "d" * 40
    with Store.open("sqlite://") as store:
        bisect_id = store.create_bisect(str(tmp_path), "a" * 40, sha, {}, datetime.now(UTC))
        with RerunRegistration(store, bisect_id, sha):
            later = datetime.now(UTC) + timedelta(seconds=2 * LEASE_TTL_S)
            assert end_dead_reruns(store, bisect_id, later) == 0
            assert running_rerun_commits(store.get_bisect(bisect_id).extra, later) == (sha,)


def test_a_rerun_judged_gone_says_it_lost_its_registration_and_stops(tmp_path: Path, held: HeldTest):
    """A living rerun whose heartbeat did not reach the store for longer than the TTL (here: judged by a clock that
    far ahead) is judged gone: its step is stored interrupted and its entry removed. When it notices, it stops its
    step's processes and says that it lost its registration, exit 2 as a coordinator whose lease was taken: it was
    not cancelled."""
    history, db = found_bisect(tmp_path, held)
    held.hold.touch()
    rerun = start_cli("run-at", "--bisect", "1", history.shas[6], db=db)
    wait_for_the_reruns_test(db, held, rerun)
    with Store.open(f"sqlite:///{db}") as store:
        assert end_dead_reruns(store, 1, datetime.now(UTC) + timedelta(seconds=2 * LEASE_TTL_S)) == 1

    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 2, (out, err)
    assert err.strip().splitlines()[-1] == (
        f"bisect: error: the rerun of bisect 1 at {history.shas[6][:12]} lost its registration: judged gone (its "
        f"heartbeat older than {LEASE_TTL_S:.0f} s, or its process not found on its host), its running steps were "
        "stored as interrupted; it stopped"
    )
    assert "Traceback" not in err
    wait_for(lambda: not held.processes(), what="the rerun's step's processes to end")
    steps = stored_rows(db, "select verdict, error_kind, detail from steps where purpose = 'rerun' order by id")
    assert steps == [DIED]
    assert rerun_entries(db) == {}


@pytest.mark.parametrize("ttl_s", [LEASE_TTL_S / 4, LEASE_TTL_S * 4])
def test_a_rerun_is_judged_gone_by_its_coordinators_lease_ttl(tmp_path: Path, ttl_s: float):
    """Judged while it runs, at a heartbeat's age between its coordinator's configured lease TTL and LEASE_TTL_S: gone
    once its coordinator's TTL passed (neither sooner nor later than its lease would be), wherever it is judged."""
    history = culprit_history(tmp_path / "repo", 4, 2)
    sha = history.shas[-1]
    judged: list[tuple[str, ...]] = []
    with Store.open(f"sqlite:///{tmp_path / 'b.db'}") as store:
        bisect_id = prepare_bisect(store, synthetic_spec(history.path, history.shas[0], sha))

        def judge() -> bool:
            extra = store.get_bisect(bisect_id).extra
            [entry] = extra["reruns"].values()
            age = timedelta(seconds=(ttl_s + LEASE_TTL_S) / 2)
            judged.append(running_rerun_commits(extra, datetime.fromisoformat(entry["heartbeat"]) + age))
            return False

        [result] = Coordinator(store, make_executor, lease_ttl_s=ttl_s).rerun(bisect_id, sha, cancelled=judge)
    assert result.verdict.value == "bad"
    assert judged
    assert set(judged) == {() if ttl_s < LEASE_TTL_S else (sha,)}
