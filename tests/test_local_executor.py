"""LocalExecutor and StepRunner with real worker processes, worktrees and process groups."""

from __future__ import annotations

import multiprocessing.forkserver
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from bisect_helpers import wait_for as wait_until
from bisect_helpers import wait_for_group_to_end
from synthetic import culprit_history

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.vocab.metric import MetricSpec
from bisector.vocab.processes import ProcessGroup, process_start
from bisector.workers import process
from bisector.workers.cgroups import end_dead_worker
from bisector.workers.executor import StepRequest
from bisector.workers.local import LocalExecutor
from bisector.workers.local_forkserver import SERVER_PRELOAD
from bisector.workers.local_forkserver import boot as boot_fork_server
from bisector.workers.process import CancelSignal
from bisector.workers.process_tree import end_groups, live_groups


def request(history, step_id: int, position: int, run: str, tmp_path: Path, timeout_s: float = 30.0) -> StepRequest:
    return StepRequest(
        step_id=step_id, bisect_id=1, sha=history.shas[position], attempt=1, repo=str(history.path), run_cmd=run,
        metric=MetricSpec(), log_path=str(tmp_path / "logs" / f"step-{step_id}.log"), timeout_s=timeout_s,
    )  # fmt: skip


def wait_for(executor: LocalExecutor, count: int, limit_s: float = 300) -> list[StepResult]:
    results: list[StepResult] = []
    deadline = time.monotonic() + limit_s
    while len(results) < count and time.monotonic() < deadline:
        results += executor.poll(0.2)
    return results


def test_each_slot_has_its_gpus_and_its_own_reused_worktree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BISECT_GPUS", "0,1,2,3")
    history = culprit_history(tmp_path / "repo", 6, 3)
    run = 'echo "cvd=$CUDA_VISIBLE_DEVICES pwd=$PWD counter=$(cat counter.txt)"'
    with LocalExecutor(str(history.path), workers=2, gpus_per_step=2) as executor:
        assignments = [executor.submit(request(history, i, i, run, tmp_path)) for i in (1, 2)]
        assert sorted(a.gpus for a in assignments) == [(0, 1), (2, 3)]
        first = wait_for(executor, 2)
        executor.submit(request(history, 3, 5, run, tmp_path))
        second = wait_for(executor, 1)
    logs = {r.step_id: Path(r.log_path).read_text() for r in first + second}
    assert "cvd=0,1" in logs[1]
    assert "counter=1" in logs[1]
    assert "cvd=2,3" in logs[2]
    assert "counter=2" in logs[2]
    assert "counter=5" in logs[3]
    worktrees = {
        line.split("pwd=")[1].split()[0]
        for log in logs.values()
        for line in log.splitlines()
        if line.startswith("cvd=")
    }
    assert len(worktrees) == 2  # the third step reused one of the two slots' worktrees
    assert all(r.verdict is Verdict.GOOD for r in first + second)


def test_timeout_kills_the_whole_process_group(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    group = tmp_path / "group"
    run = f"echo $$ > {group}; sleep 600 & sleep 60"  # the command leads its step's group
    with LocalExecutor(str(history.path), workers=1) as executor:
        executor.submit(request(history, 1, 0, run, tmp_path, timeout_s=5.0))
        (result,) = wait_for(executor, 1)
    assert (result.verdict, result.error_kind) == (Verdict.ERROR, ErrorKind.TIMEOUT)  # not 60 s of sleep
    wait_for_group_to_end(int(group.read_text()), "the background child of the timed-out test to end")


def test_a_worker_killed_mid_step_is_an_error_and_its_slot_comes_back(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    group = tmp_path / "group"
    with LocalExecutor(str(history.path), workers=1) as executor:
        executor.submit(request(history, 1, 0, f"echo $$ > {group}.tmp; mv {group}.tmp {group}; sleep 600", tmp_path))
        wait_until(group.exists, what="the step's test to start")
        os.kill(executor.worker_pids()["local-0"], signal.SIGKILL)
        (lost,) = wait_for(executor, 1)
        assert (lost.verdict, lost.error_kind) == (Verdict.ERROR, ErrorKind.WORKER_LOST)
        executor.submit(request(history, 2, 0, "bash test.sh", tmp_path))
        (again,) = wait_for(executor, 1)
        assert again.verdict is Verdict.GOOD
    wait_for_group_to_end(int(group.read_text()), "the lost worker's test to end")


def test_cancel_stops_a_running_step(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    running = tmp_path / "running"
    with LocalExecutor(str(history.path), workers=1) as executor:
        executor.submit(request(history, 7, 0, f"touch {running}; sleep 60", tmp_path))
        deadline = time.monotonic() + 300  # only against a hang: the event waited on is the step running
        while not running.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        executor.cancel(7)
        (result,) = wait_for(executor, 1)
    assert result.verdict is Verdict.CANCELLED  # not the GOOD of a sleep that ran its 60 s
    assert result.run_s > 0


def test_a_broken_checkout_is_a_harness_error(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    bogus = StepRequest(
        step_id=1, bisect_id=1, sha="0" * 40, attempt=1, repo=str(history.path), run_cmd="true",
        metric=MetricSpec(), log_path=str(tmp_path / "x.log"), timeout_s=10,
    )  # fmt: skip
    with LocalExecutor(str(history.path), workers=1) as executor:
        executor.submit(bogus)
        (result,) = wait_for(executor, 1)
    assert (result.verdict, result.error_kind) == (Verdict.ERROR, ErrorKind.HARNESS)


def test_untracked_files_a_step_leaves_are_gone_before_the_next_step(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 4, 2)
    messy = "echo junk > leftover.txt && mkdir -p junkdir && touch junkdir/x"
    check = "test ! -e leftover.txt && test ! -e junkdir && echo tidy"
    with LocalExecutor(str(history.path), workers=1) as executor:
        executor.submit(request(history, 1, 1, messy, tmp_path))
        (first,) = wait_for(executor, 1)
        executor.submit(request(history, 2, 1, check, tmp_path))  # the same commit: only the leftovers differ
        (second,) = wait_for(executor, 1)
        executor.submit(request(history, 3, 3, messy, tmp_path))
        (third,) = wait_for(executor, 1)
        executor.submit(request(history, 4, 0, check, tmp_path))
        (fourth,) = wait_for(executor, 1)
    assert [r.verdict for r in (first, second, third, fourth)] == [Verdict.GOOD] * 4, fourth.detail
    assert "tidy" in Path(second.log_path).read_text()


def test_workers_take_the_environment_and_directory_of_the_executor_that_starts_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Workers fork from a long-lived server; they must not keep the environment it started with."""
    history = culprit_history(tmp_path / "repo", 2, 1)
    run = 'echo "mark=$BISECT_TEST_MARK pwd=$PWD"'
    seen = []
    for index, mark in enumerate(("one", "two")):
        monkeypatch.setenv("BISECT_TEST_MARK", mark)
        monkeypatch.setenv("BISECT_CACHE_DIR", str(tmp_path / f"cache-{mark}"))
        with LocalExecutor(str(history.path), workers=1) as executor:
            executor.submit(request(history, index + 1, 0, run, tmp_path))
            (result,) = wait_for(executor, 1)
        seen.append(Path(result.log_path).read_text())
    assert "mark=one" in seen[0]
    assert "mark=two" in seen[1]
    assert f"pwd={tmp_path / 'cache-one'}" in seen[0]
    assert f"pwd={tmp_path / 'cache-two'}" in seen[1]


def test_a_worker_that_died_while_idle_is_replaced_when_a_step_is_sent(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    with LocalExecutor(str(history.path), workers=1) as executor:
        executor.submit(request(history, 1, 0, "true", tmp_path))
        (first,) = wait_for(executor, 1)
        dead = executor.worker_pids()["local-0"]
        os.kill(dead, signal.SIGKILL)
        # reaped (by the fork server): only then have all its threads exited and closed its end of the pipe
        wait_until(lambda: not Path(f"/proc/{dead}").exists(), what="the idle worker to die and be reaped")
        assignment = executor.submit(request(history, 2, 1, "echo second", tmp_path))
        (second,) = wait_for(executor, 1)
        assert executor.worker_pids()["local-0"] != dead
    assert assignment.worker == "local-0"
    assert (first.verdict, second.verdict) == (Verdict.GOOD, Verdict.GOOD)
    assert "second" in Path(second.log_path).read_text()


def test_a_repository_made_again_at_the_same_path_gets_fresh_worktrees(tmp_path: Path):
    """The cached worktree of a deleted repository (e.g. `bisect demo run` re-creating its demo) is stale:
    git would say "not a git repository". It is made again instead of failing every step."""
    import shutil

    first = culprit_history(tmp_path / "repo", 3, 2)
    with LocalExecutor(str(first.path), workers=1) as executor:
        executor.submit(request(first, 1, 1, "true", tmp_path))
        (before,) = wait_for(executor, 1)
    shutil.rmtree(first.path)
    second = culprit_history(tmp_path / "repo", 5, 4)
    with LocalExecutor(str(second.path), workers=1) as executor:
        executor.submit(request(second, 2, 4, "cat counter.txt", tmp_path))
        (after,) = wait_for(executor, 1)
    assert (before.verdict, after.verdict) == (Verdict.GOOD, Verdict.GOOD), after.detail
    assert Path(after.log_path).read_text().rstrip().endswith("4")


def test_a_cancel_signal_stops_the_command_at_once_not_at_the_next_look(tmp_path: Path, monkeypatch):
    """A worker's cancel wakes run_shell through the signal's fd: with no periodic look left, only that can stop
    the command before it ends by itself."""
    monkeypatch.setattr(process, "POLL_INTERVAL_S", 3600.0)
    cancel = CancelSignal()

    def cancel_soon(pgid: int) -> None:
        threading.Timer(0.2, cancel.set).start()

    with (tmp_path / "log").open("wb") as log:
        outcome = process.run_shell(
            "sleep 5", tmp_path, dict(os.environ), log, 60.0,
            should_cancel=cancel.is_set, on_start=cancel_soon, cancel_fd=cancel.fileno(),
        )  # fmt: skip
    assert outcome.cancelled
    assert outcome.exit_code != 0  # killed, not finished
    cancel.close()


def test_a_stopped_command_loses_what_left_its_group_first_and_may_wind_down(tmp_path: Path):
    """On a cancel, a process the command started in a session of its own (as a container build's RUN step is) is
    killed before any signal to the command's group, and the command, seeing it end, finishes by itself."""
    ready = tmp_path / "leaver"
    leaver = f"import os, time; os.setsid(); open({str(ready)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    script = f'{sys.executable} -c "{leaver}" & wait $!; echo winding down; exit 7'
    with (tmp_path / "log").open("wb") as log:
        outcome = process.run_shell(script, tmp_path, dict(os.environ), log, 600.0, should_cancel=ready.exists)
    assert outcome.cancelled
    assert outcome.exit_code == 7, outcome.output.tail()  # not killed by the group's SIGTERM
    assert "winding down" in outcome.output.tail()
    with pytest.raises(ProcessLookupError):
        os.kill(int(ready.read_text()), 0)


def test_a_cancel_signal_is_readable_exactly_while_set():
    cancel = CancelSignal()

    def readable() -> bool:
        return bool(select.select([cancel.fileno()], [], [], 0)[0])

    assert not cancel.is_set()
    assert not readable()
    cancel.set()
    cancel.set()  # twice: one clear still clears it
    assert cancel.is_set()
    assert readable()
    cancel.clear()
    assert not cancel.is_set()
    assert not readable()
    cancel.clear()
    cancel.set()
    assert readable()
    cancel.close()


def test_a_step_runs_in_a_process_that_holds_more_than_1024_fds(tmp_path: Path):
    """A Ray actor's process may hold fds past select(2)'s limit; the step's wait must still work there."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the fd limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.dup(0) for _ in range(1100)]
    cancel = CancelSignal()  # its fds land past 1024 too
    try:
        assert cancel.fileno() > 1024
        with (tmp_path / "log").open("wb") as log:
            outcome = process.run_shell(
                "exit 3", tmp_path, dict(os.environ), log, 30.0, should_cancel=cancel.is_set,
                cancel_fd=cancel.fileno(),
            )  # fmt: skip
        assert (outcome.exit_code, outcome.cancelled, outcome.timed_out) == (3, False, False)
    finally:
        cancel.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_fork_server_preloads_the_module_of_the_workers() -> None:
    """`bisect start` boots the fork server before importing workers.local: what it preloads must import that
    module and what a worker imports only when it runs a step, or every worker would import them after the fork."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(SERVER_PRELOAD)
    assert spec is not None
    assert spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert {LocalExecutor.__module__, "bisector.workers.step", "regex"} <= imported


def _blocked_in(thread: threading.Thread, function: str) -> bool:
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def test_a_fork_server_killed_while_it_forks_a_worker_is_started_afresh(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 4, 2)
    boot_fork_server()
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    assert server is not None
    os.kill(server, signal.SIGSTOP)  # alive to the executor's look, so it asks this server for its worker
    made: list[LocalExecutor | BaseException] = []

    def make() -> None:
        try:
            made.append(LocalExecutor(str(history.path), workers=1))
        except BaseException as exc:
            made.append(exc)

    maker = threading.Thread(target=make)
    maker.start()
    deadline = time.monotonic() + 60
    while not _blocked_in(maker, "read_signed") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _blocked_in(maker, "read_signed"), "the executor never asked the stopped fork server for a worker"
    os.kill(server, signal.SIGKILL)  # it dies mid-fork: the executor reads EOF where the worker's pid should be
    maker.join(60)
    executor = made[0]
    assert isinstance(executor, LocalExecutor), executor
    with executor:
        executor.submit(request(history, 1, 1, "bash test.sh", tmp_path))
        results = wait_for(executor, 1)
    assert [r.verdict for r in results] == [Verdict.GOOD]


def test_a_worker_that_starts_without_its_worktree_makes_it_for_the_first_step_that_needs_it(tmp_path: Path):
    """Steps on images run in their image: their workers start without checking the worktree out."""
    history = culprit_history(tmp_path / "repo", 6, 3)
    with LocalExecutor(str(history.path), workers=1, worktrees=False) as executor:
        executor.submit(request(history, 1, 4, 'echo "counter=$(cat counter.txt)"', tmp_path))
        [result] = wait_for(executor, 1)
    assert result.verdict is Verdict.GOOD, result.detail
    assert "counter=4" in Path(result.log_path).read_text()


def a_sleeper_in_a_session_of_its_own() -> subprocess.Popen[bytes]:
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    deadline = time.monotonic() + 60  # only against a hang
    while process_start(sleeper.pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return sleeper


@pytest.mark.parametrize(
    "end",
    [end_groups, lambda groups, grace_s: end_dead_worker(None, groups, grace_s)],
    ids=["end_groups (LocalExecutor.close)", "end_dead_worker"],
)
def test_a_recorded_group_is_ended_only_while_its_leader_is_the_recorded_process(
    end: Callable[[list[ProcessGroup], float], None],
) -> None:
    """A group whose recorded leader is gone and whose pgid now names another process's group (simulated: a live
    group recorded with another start time) is not signalled; one led by the recorded process is ended."""
    ours, stranger = a_sleeper_in_a_session_of_its_own(), a_sleeper_in_a_session_of_its_own()
    try:
        stranger_started = int(process_start(stranger.pid) or 0)
        end(
            [
                ProcessGroup(ours.pid, str(process_start(ours.pid))),
                ProcessGroup(stranger.pid, str(stranger_started - 1)),
            ],
            1.0,
        )
        assert ours.wait(timeout=60) == -signal.SIGTERM
        assert stranger.poll() is None
    finally:
        for sleeper in (ours, stranger):
            sleeper.kill()
            sleeper.wait()


def a_group_whose_leader_exited(tmp_path: Path) -> tuple[ProcessGroup, int, int]:
    """A process group (as recorded while its leader ran) whose leader has exited and been reaped, leaving a member
    that runs on in the group and a descendant of that member in a session of its own, which the member waits for
    (as podman waits for its RUN step); the member's pid and the descendant's."""
    member, leaver, member_script = tmp_path / "member", tmp_path / "leaver", tmp_path / "member.sh"
    member_script.write_text(f"setsid sh -c 'echo $$ > {leaver}; exec sleep 600' &\nwait\n")  # ends with it
    script = f"sh {member_script} & echo $! > {member}; read _"
    leader = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60  # only against a hang
        while not (member.exists() and leaver.exists() and member.read_text() and leaver.read_text()):
            assert time.monotonic() < deadline, "the group's processes never started"
            time.sleep(0.01)
        group = ProcessGroup(leader.pid, str(process_start(leader.pid)))
    finally:
        assert leader.stdin is not None
        leader.stdin.close()  # the leader reads its end of input and exits
        leader.wait()
    return group, int(member.read_text()), int(leaver.read_text())


@pytest.mark.parametrize(
    "end",
    [end_groups, lambda groups, grace_s: end_dead_worker(None, groups, grace_s)],
    ids=["end_groups (LocalExecutor.close)", "end_dead_worker"],
)
def test_a_recorded_group_whose_leader_exited_is_ended_with_what_its_members_started(
    end: Callable[[list[ProcessGroup], float], None], tmp_path: Path
) -> None:
    """The leader's pid names no process, yet the group lives on in its member (Linux keeps the pid for the group):
    the group is the recorded one, ended with the member's descendant outside it."""
    group, member, leaver = a_group_whose_leader_exited(tmp_path)
    try:
        assert process_start(group.pgid) is None
        assert live_groups([group.pgid]) == {group.pgid}
        end([group], 1.0)
        deadline = time.monotonic() + 60  # only against a hang
        while running(member) or running(leaver):
            assert time.monotonic() < deadline, "the leaderless group (or its member's descendant) was left running"
            time.sleep(0.01)
    finally:
        for pid in (member, leaver):
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    """Whether the pid names a process that has not exited (a zombie its new parent has not reaped yet has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_closing_ends_the_groups_a_dead_worker_announced(tmp_path: Path) -> None:
    """close() ends the announced groups of a worker that died before a poll saw it (its test in a session of its own
    outlives it), by the start times its worker read."""
    history = culprit_history(tmp_path / "repo", 2, 1)
    leader = tmp_path / "leader"
    executor = LocalExecutor(str(history.path), workers=1)
    try:
        executor.submit(
            request(history, 1, 0, f"echo $$ > {leader}.tmp; mv {leader}.tmp {leader}; exec sleep 600", tmp_path)
        )
        deadline = time.monotonic() + 300  # only against a hang
        while not (leader.exists() and executor.poll(0) == [] and executor.process_groups()):
            assert time.monotonic() < deadline, "the step's test never started"
            time.sleep(0.02)
        [group] = executor.process_groups()
        assert group.pgid == int(leader.read_text())
        os.kill(executor.worker_pids()["local-0"], signal.SIGKILL)
    finally:
        executor.close()
    assert not live_groups([group.pgid])
