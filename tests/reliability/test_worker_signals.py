"""A stop signal to the coordinator's process group (Ctrl-C's SIGINT, a CI runner's or systemd's SIGTERM): the
worker processes kill their tests' process groups and exit without a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from synthetic import culprit_history
from worker_steps import DRIVER, SAFETY_TIMEOUT_S, alive

ROOT = Path(__file__).resolve().parents[2]


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
