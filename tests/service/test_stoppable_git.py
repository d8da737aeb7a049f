"""StoppableGit ends a git command (past its timeout, at stop(), at a stop signal in its thread) with SIGTERM to its
process group first, so that a fetch can remove its ref locks, and SIGKILL only after the grace."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from bisector.runner.stopping import StopRequested, stop_on_signals
from bisector.vocab.errors import RepoError
from bisector.vocab.gitrepo import StoppableGit

WAIT_S = 120.0  # only ends a hung test; no speed target
# A git command that cleans up on SIGTERM (as a fetch removes its ref locks); $READY once its trap is set.
CLEANS_UP = '!trap "echo TERM > \\"$CLEANED\\"; exit 1" TERM; echo > "$READY"; while :; do sleep 0.05; done'
IGNORES_TERM = '!trap "" TERM; while :; do sleep 0.05; done'


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    for name, command in (("cleans-up", CLEANS_UP), ("ignores-term", IGNORES_TERM)):
        subprocess.run(["git", "-C", str(path), "config", f"alias.{name}", command], check=True)
    monkeypatch.setenv("CLEANED", str(tmp_path / "cleaned"))
    monkeypatch.setenv("READY", str(tmp_path / "ready"))
    return path


def signal_once_ready(ready: Path) -> threading.Thread:
    def send() -> None:
        deadline = time.monotonic() + WAIT_S
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def test_a_stop_signal_ends_the_command_with_sigterm_first_so_it_cleans_up(repo: Path, tmp_path: Path) -> None:
    git = StoppableGit(timeout_s=WAIT_S, stop_grace_s=WAIT_S)
    sender = signal_once_ready(tmp_path / "ready")
    with stop_on_signals(), pytest.raises(StopRequested):
        git.run(repo, "cleans-up")
    sender.join()
    assert (tmp_path / "cleaned").read_text() == "TERM\n"


def test_a_command_that_ignores_sigterm_past_its_timeout_is_killed_after_the_grace(repo: Path) -> None:
    git = StoppableGit(timeout_s=0.1, stop_grace_s=1.0)
    started = time.monotonic()
    with pytest.raises(RepoError, match=r"git ignores-term in .* failed: no answer in 0.1 s"):
        git.run(repo, "ignores-term")
    assert time.monotonic() - started >= 1.0  # SIGTERM, the grace, then SIGKILL (not SIGKILL at once)
