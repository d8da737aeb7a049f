"""A test that starts a `setsid nohup` daemon: where cgroup v2 can be used, the daemon ends with its step."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cgroup_helpers import cgroup_v2_writable, in_cgroup, isolated_cgroup
from synthetic import culprit_history
from worker_steps import DRIVER, SAFETY_TIMEOUT_S, alive, run_one, step_request

from bisector.vocab.domain import ErrorKind, Verdict
from bisector.workers.local import LocalExecutor


def test_a_setsid_daemon_the_test_started_is_gone_after_the_step(tmp_path: Path):
    if not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 here: a setsid daemon outlives its step (the process group still dies)")
    history = culprit_history(tmp_path / "repo", 2, 1)
    pid_file = tmp_path / "daemon.pid"
    daemon = f"setsid nohup sleep 1000 >/dev/null 2>&1 & echo $! > {pid_file}; bash test.sh"
    daemon_pid = 0
    try:
        with LocalExecutor(str(history.path), workers=1) as executor:
            result = run_one(executor, step_request(history, 1, 0, daemon, tmp_path / "logs"))
            daemon_pid = int(pid_file.read_text())
            deadline = time.monotonic() + SAFETY_TIMEOUT_S
            while alive(daemon_pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            gone_while_the_worker_lives = not alive(daemon_pid)
    finally:
        if daemon_pid and alive(daemon_pid):
            os.kill(daemon_pid, signal.SIGKILL)
    assert result.verdict is Verdict.GOOD
    assert gone_while_the_worker_lives, "the daemon the test started outlived its step"


# A coordinator whose worker is SIGKILLed while its test (argv[1], pickled step) runs a setsid daemon that writes
# its pid to argv[2]: prints the loss's error kind and whether the daemon was alive when the loss was reported.
KILLED_WORKER = textwrap.dedent(
    """
    import os, pickle, signal, sys, time
    from pathlib import Path
    from bisector.workers.local import LocalExecutor
    from worker_steps import alive, results_of

    request, pid_file = pickle.loads(Path(sys.argv[1]).read_bytes()), Path(sys.argv[2])
    with LocalExecutor(request.repo, workers=1) as executor:
        executor.submit(request)
        while not pid_file.exists():
            time.sleep(0.05)
        (worker_pid,) = executor.worker_pids().values()
        os.kill(worker_pid, signal.SIGKILL)
        (result,) = results_of(executor, 1)
        print(result.error_kind.value, alive(int(pid_file.read_text())))
    """
)


def test_a_setsid_daemon_of_a_killed_workers_test_is_gone_when_the_loss_is_reported(tmp_path: Path):
    """The dead worker's reaper (LocalExecutor) ends its step cgroup with its process groups: a daemon its test
    started is gone before the loss is reported, not at the next step started beside it. The coordinator runs in
    a cgroup of the test's own, so that no step of a test running in parallel sweeps the dead worker's cgroup."""
    if not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 here: a setsid daemon outlives its step (the process group still dies)")
    history = culprit_history(tmp_path / "repo", 2, 1)
    pid_file = tmp_path / "daemon.pid"
    # from a subshell that exits at once: the daemon is no descendant of the test (reparented), out of its group
    daemon = f"(setsid nohup sleep 1000 >/dev/null 2>&1 & echo $! > {pid_file}.tmp); mv {pid_file}.tmp {pid_file}; "
    request = step_request(history, 1, 0, daemon + "exec sleep 1000", tmp_path / "logs", timeout_s=SAFETY_TIMEOUT_S)
    (tmp_path / "request.pickle").write_bytes(pickle.dumps(request))
    here = Path(__file__).resolve().parent
    support = [here.parents[1], here, here.parents[1] / "benchmarks"]  # the checkout, worker_steps, synthetic
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, support))}
    try:
        with isolated_cgroup() as cgroup:
            driver = subprocess.run(
                in_cgroup(cgroup, [sys.executable, "-c", KILLED_WORKER, str(tmp_path / "request.pickle"),
                                   str(pid_file)]),
                env=env, capture_output=True, text=True, timeout=SAFETY_TIMEOUT_S,
            )  # fmt: skip
    finally:
        if pid_file.exists() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert driver.returncode == 0, driver.stderr
    assert driver.stdout.split() == [ErrorKind.WORKER_LOST.value, "False"], "the daemon outlived the loss's report"


# The follow-up step of the orphan test, run in the same cgroup as the killed driver (see isolated_cgroup).
ONE_STEP = textwrap.dedent(
    """
    import sys
    from bisector.vocab.metric import MetricSpec
    from bisector.workers.executor import StepRequest
    from bisector.workers.local import LocalExecutor

    repo, sha, log = sys.argv[1], sys.argv[2], sys.argv[3]
    with LocalExecutor(repo, workers=1) as executor:
        executor.submit(StepRequest(
            step_id=3, bisect_id=1, sha=sha, attempt=1, repo=repo, metric=MetricSpec(), timeout_s=120,
            run_cmd="bash test.sh", log_path=log,
        ))
        results = []
        while not results:
            results = executor.poll(0.5)
    print(results[0].verdict.value)
    """
)


def test_tests_orphaned_by_workers_killed_with_their_coordinator_end_at_the_next_step(tmp_path: Path):
    """SIGKILL to the coordinator's whole group: its workers die with it and cannot end their tests (sessions of
    their own); the next worker that starts a step on the host ends them."""
    if not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 here: tests orphaned by a SIGKILLed worker run on")
    history = culprit_history(tmp_path / "repo", 2, 1)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    tests: list[int] = []
    with isolated_cgroup() as cgroup:
        driver = subprocess.Popen(
            in_cgroup(cgroup, [sys.executable, "-c", DRIVER, str(history.path), history.shas[0], str(out)]),
            env=env, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + SAFETY_TIMEOUT_S
            while not all((out / name).exists() for name in ("test-1", "test-2", "workers")):
                assert time.monotonic() < deadline, "the tests never started"
                time.sleep(0.05)
            tests = [int((out / f"test-{i}").read_text()) for i in (1, 2)]
            workers = [int(pid) for pid in (out / "workers").read_text().split()]
            os.killpg(driver.pid, signal.SIGKILL)  # coordinator and workers at once
            driver.wait()
            while any(alive(pid) for pid in workers):
                assert time.monotonic() < deadline, "the workers outlived SIGKILL"
                time.sleep(0.05)
            assert all(alive(pid) for pid in tests)  # orphaned
            next_step = subprocess.run(
                in_cgroup(cgroup, [sys.executable, "-c", ONE_STEP, str(history.path), history.shas[0],
                                   str(tmp_path / "step-3.log")]),
                env=env, capture_output=True, text=True, timeout=SAFETY_TIMEOUT_S,
            )  # fmt: skip
            while any(alive(pid) for pid in tests) and time.monotonic() < deadline:
                time.sleep(0.05)
            orphans_left = [pid for pid in tests if alive(pid)]
        finally:
            for pid in tests:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
    assert next_step.returncode == 0, next_step.stderr
    assert next_step.stdout.split() == [Verdict.GOOD.value]
    assert orphans_left == [], "tests orphaned by killed workers kept running"
