"""Step commands started by a launcher that joined their cgroup ahead of the step (workers/step_launcher.py)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cgroup_helpers import cgroup_v2_writable

from workers import process, step_launcher

PRINT_PLACE = 'echo "cwd=$PWD"; echo "mark=${STEP_MARK-unset}"; echo "home=${HOME-unset}"; cat /proc/self/cgroup; \
readlink /proc/self/fd/0'


@pytest.fixture
def launchers() -> Iterator[None]:
    if not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 here: commands start without a launcher")
    step_launcher.discard_all()
    yield
    step_launcher.discard_all()


def _wait_for_output(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_a_ready_launcher_runs_the_command_in_its_cgroup_with_exactly_its_directory_and_environment(
    tmp_path: Path, launchers: None
):
    step_launcher.keep_one_ready()
    launched = step_launcher.launch(
        ["bash", "-c", PRINT_PLACE], tmp_path, {"PATH": os.environ["PATH"], "STEP_MARK": "7"}
    )
    assert launched is not None
    try:
        output = _wait_for_output(launched.output_fd)
        assert launched.proc.wait() == 0
    finally:
        launched.cgroup.kill_and_remove()
        os.close(launched.output_fd)
        step_launcher.finished()
    lines = output.splitlines()
    assert lines[:3] == [f"cwd={tmp_path}", "mark=7", "home=unset"]  # the worker's HOME is not passed on
    assert any(line.startswith("0::") and line.endswith("/" + launched.cgroup.path.name) for line in lines), output
    assert lines[-1] == "/dev/null"  # not the launcher's request pipe


def test_every_run_shell_command_after_the_first_starts_through_a_launcher_and_its_cgroup_is_removed(
    tmp_path: Path, launchers: None
):
    cgroups: list[str] = []
    for _ in range(3):
        ready = [launcher.cgroup.path for launcher in step_launcher._this_process_pool().ready]
        with (tmp_path / "log").open("wb") as log:
            outcome = process.run_shell("cat /proc/self/cgroup", tmp_path, dict(os.environ), log, 60.0)
        assert outcome.exit_code == 0
        (own,) = [line for line in (tmp_path / "log").read_text().splitlines() if line.startswith("0::")]
        cgroups.append(own.rsplit("/", 1)[-1])
        if ready:
            assert own.endswith("/" + ready[0].name), "the command did not start through the ready launcher"
            assert not ready[0].exists(), "the step's cgroup outlived the step"
    assert len(set(cgroups)) == 3  # a fresh cgroup for each command
    assert len(step_launcher._this_process_pool().ready) == 1  # one kept for the next command


def test_a_launcher_that_died_while_it_waited_is_replaced_and_the_command_still_runs(tmp_path: Path, launchers: None):
    step_launcher.keep_one_ready()
    (waiting,) = step_launcher._this_process_pool().ready
    os.kill(waiting.proc.pid, signal.SIGKILL)
    waiting.proc.wait()
    with (tmp_path / "log").open("wb") as log:
        outcome = process.run_shell("echo ran", tmp_path, dict(os.environ), log, 60.0)
    assert (outcome.exit_code, (tmp_path / "log").read_text()) == (0, "ran\n")
    assert not waiting.cgroup.path.exists()


def test_a_missing_directory_fails_at_the_start_as_without_a_launcher(tmp_path: Path, launchers: None):
    step_launcher.keep_one_ready()
    with (tmp_path / "log").open("wb") as log, pytest.raises(FileNotFoundError):
        process.run_shell("true", tmp_path / "gone", dict(os.environ), log, 60.0)
    assert step_launcher._this_process_pool().running == 0


def test_discarded_launchers_exit_and_their_cgroups_go(launchers: None):
    step_launcher.keep_one_ready()
    (waiting,) = step_launcher._this_process_pool().ready
    step_launcher.discard_all()
    assert waiting.proc.poll() == 0  # it read end of file and left
    assert not waiting.cgroup.path.exists()


def _launch_in_child(cwd: str, answer: multiprocessing.SimpleQueue[bool]) -> None:
    launched = step_launcher.launch(["true"], Path(cwd), {})
    answer.put(launched is None)


def test_a_forked_child_does_not_take_its_parents_launcher(tmp_path: Path, launchers: None):
    step_launcher.keep_one_ready()
    (waiting,) = step_launcher._this_process_pool().ready
    answer: multiprocessing.SimpleQueue[bool] = multiprocessing.get_context("fork").SimpleQueue()
    child = multiprocessing.get_context("fork").Process(target=_launch_in_child, args=(str(tmp_path), answer))
    child.start()
    child.join(timeout=60)
    assert answer.get() is True
    time.sleep(0.1)
    assert waiting.proc.poll() is None  # still waiting, for this process's next command
    assert step_launcher._this_process_pool().ready == [waiting]
