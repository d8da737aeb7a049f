"""A stop signal to the coordinator's process group (Ctrl-C's SIGINT, a CI runner's or systemd's SIGTERM): the
worker processes kill their tests' process groups and exit without a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from worker_steps import SAFETY_TIMEOUT_S

from bisector.synthetic import culprit_history

ROOT = Path(__file__).resolve().parents[2]

# A stand-in coordinator: two local workers, each running a test that writes its pid and sleeps. It dies of the
# signal itself (default dispositions), as a coordinator without handlers would.
DRIVER = textwrap.dedent(
    """
    import signal, sys, time
    from pathlib import Path
    from bisector.metric import MetricSpec
    from workers.executor import StepRequest
    from workers.local import LocalExecutor

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    repo, sha, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    executor = LocalExecutor(repo, workers=2)
    for step_id in (1, 2):
        executor.submit(StepRequest(
            step_id=step_id, bisect_id=1, sha=sha, attempt=1, repo=repo, metric=MetricSpec(), timeout_s=3600,
            run_cmd=f"echo $$ > {out}/test-{step_id}.tmp && mv {out}/test-{step_id}.tmp {out}/test-{step_id} && "
            "exec sleep 1000",
            log_path=str(out / f"step-{step_id}.log"),
        ))
    (out / "workers").write_text(" ".join(str(pid) for pid in executor.worker_pids().values()))
    while True:
        executor.poll(1.0)
    """
)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + SAFETY_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGKILL, False)],
    ids=["SIGTERM to the group", "SIGINT to the group", "SIGKILL to the coordinator alone"],
)
def test_a_stop_signal_to_the_coordinators_group_ends_the_tests_quietly(
    tmp_path: Path, signum: signal.Signals, to_group: bool
):
    history = culprit_history(tmp_path / "repo", 2, 1)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(history.path), history.shas[0], str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,  # its own group to signal
    )  # fmt: skip
    tests: list[int] = []
    try:
        wait_until(lambda: all((out / name).exists() for name in ("test-1", "test-2", "workers")), "the tests")
        tests = [int((out / f"test-{i}").read_text()) for i in (1, 2)]
        workers = [int(pid) for pid in (out / "workers").read_text().split()]
        assert all(alive(pid) for pid in tests + workers)
        if to_group:
            os.killpg(driver.pid, signum)  # what a terminal's Ctrl-C or `kill -TERM -PGID` does
        else:
            os.kill(driver.pid, signum)  # the workers see its pipe close
        _, stderr = driver.communicate(timeout=SAFETY_TIMEOUT_S)
        wait_until(lambda: not any(alive(pid) for pid in tests), "the tests to be killed")
        wait_until(lambda: not any(alive(pid) for pid in workers), "the workers to exit")
    finally:
        for pid in tests:  # whatever the outcome, leave no sleeper behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")
    assert b"KeyboardInterrupt" not in stderr, stderr.decode(errors="replace")
