"""A test that starts a `setsid nohup` daemon: where cgroup v2 can be used, the daemon ends with its step."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from worker_steps import SAFETY_TIMEOUT_S, run_one, step_request

from bisector.domain import Verdict
from bisector.synthetic import culprit_history
from workers.local import LocalExecutor


def cgroup_v2_writable() -> bool:
    """Whether this process may make a child cgroup v2 of its own (what the workers need)."""
    mount = next((line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
                  if line.split()[2] == "cgroup2"), None)  # fmt: skip
    own = next(
        (line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")), None
    )
    if mount is None or own is None:
        return False
    probe = Path(mount) / own.lstrip("/") / f"gpu-bisect-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    probe.rmdir()
    return True


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


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
