"""Step commands started by a launcher that joined their cgroup ahead of the step (workers/step_launcher.py): they
start as Popen starts them (signals, stdin, environment, directory, start errors), each in a fresh cgroup."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cgroup_helpers import cgroup_v2_writable
from worker_steps import SAFETY_TIMEOUT_S

from bisector.workers import process, step_launcher

PRINT_PLACE = 'echo "cwd=$PWD"; echo "mark=${STEP_MARK-unset}"; echo "home=${HOME-unset}"; cat /proc/self/cgroup; \
readlink /proc/self/fd/0'
SIGNAL_STATE = "grep -E '^Sig(Ign|Blk):' /proc/self/status"


@pytest.fixture
def launchers() -> Iterator[None]:
    if not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 here: commands start without a launcher")
    step_launcher.discard_all()
    step_launcher.keep_one_ready()
    yield
    step_launcher.discard_all()


def _ready() -> list[step_launcher._Ready]:
    return list(step_launcher._pool.ready)


def _run(command: str, cwd: Path, env: dict[str, str], log: Path) -> process.ProcessOutcome:
    with log.open("wb") as file:
        return process.run_shell(command, cwd, env, file, 60.0)


def _wait_for_output(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_a_ready_launcher_runs_the_command_in_its_cgroup_with_exactly_its_directory_and_environment(
    tmp_path: Path, launchers: None
):
    env = {"PATH": os.environ["PATH"], "STEP_MARK": "7"}
    launched = step_launcher.launch(["bash", "-c", PRINT_PLACE], tmp_path, env)
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


def test_the_command_starts_with_the_signal_state_popen_gives_it(tmp_path: Path, launchers: None):
    """Python ignores SIGPIPE and SIGXFSZ; Popen restores them for its child, and so must the launcher (a test's
    `yes | head` would otherwise run to its deadline, or print Broken pipe lines a pattern may match)."""
    (waiting,) = _ready()
    through_launcher = _run(SIGNAL_STATE, tmp_path, dict(os.environ), tmp_path / "launched.log")
    assert not waiting.cgroup.path.exists()  # it ran the command
    step_launcher.discard_all()
    through_popen = _run(SIGNAL_STATE, tmp_path, dict(os.environ), tmp_path / "popen.log")
    assert through_launcher.exit_code == through_popen.exit_code == 0
    assert (tmp_path / "launched.log").read_text() == (tmp_path / "popen.log").read_text()

    step_launcher.keep_one_ready()
    piped = _run("set -o pipefail; yes | head -1", tmp_path, dict(os.environ), tmp_path / "pipe.log")
    assert (piped.exit_code, (tmp_path / "pipe.log").read_text()) == (141, "y\n")  # yes died of SIGPIPE
    assert not piped.timed_out


def test_every_command_starts_through_a_launcher_in_a_fresh_cgroup_that_goes_with_it(tmp_path: Path, launchers: None):
    cgroups: list[str] = []
    for _ in range(3):
        deadline = time.monotonic() + SAFETY_TIMEOUT_S  # only against a hang
        while not _ready() and time.monotonic() < deadline:  # the next one starts from a thread
            time.sleep(0.01)
        (waiting,) = _ready()
        outcome = _run("cat /proc/self/cgroup", tmp_path, dict(os.environ), tmp_path / "log")
        assert outcome.exit_code == 0
        (own,) = [line for line in (tmp_path / "log").read_text().splitlines() if line.startswith("0::")]
        assert own.endswith("/" + waiting.cgroup.path.name), "the command did not start through the ready launcher"
        assert not waiting.cgroup.path.exists(), "the step's cgroup outlived the step"
        cgroups.append(own)
    assert len(set(cgroups)) == 3
    assert step_launcher._pool.running == 0


def test_a_command_that_cannot_start_raises_as_popen_does_and_counts_as_no_run(tmp_path: Path, launchers: None):
    no_bash = {"PATH": str(tmp_path / "no-bin")}
    for cwd, env in ((tmp_path, no_bash), (tmp_path / "gone", dict(os.environ))):  # no bash; no such directory
        with (tmp_path / "log").open("wb") as log, pytest.raises(FileNotFoundError):
            process.run_shell("true", cwd, env, log, 60.0)
    with (tmp_path / "log").open("wb") as log, pytest.raises(ValueError, match="null byte"):
        process.run_shell("true", tmp_path, {**os.environ, "BAD": "a\0b"}, log, 60.0)
    assert step_launcher._pool.running == 0
    outcome = _run("echo ran", tmp_path, dict(os.environ), tmp_path / "log")
    assert (outcome.exit_code, (tmp_path / "log").read_text()) == (0, "ran\n")


def test_a_relative_directory_is_the_workers_not_the_launchers(tmp_path: Path, launchers: None, monkeypatch):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path)
    outcome = _run("pwd", Path("work"), dict(os.environ), tmp_path / "log")
    assert (outcome.exit_code, (tmp_path / "log").read_text()) == (0, f"{tmp_path / 'work'}\n")


def test_a_launcher_that_died_while_it_waited_is_replaced_and_the_command_still_runs(tmp_path: Path, launchers: None):
    (waiting,) = _ready()
    os.kill(waiting.proc.pid, signal.SIGKILL)
    waiting.proc.wait()
    outcome = _run("echo ran", tmp_path, dict(os.environ), tmp_path / "log")
    assert (outcome.exit_code, (tmp_path / "log").read_text()) == (0, "ran\n")
    assert not waiting.cgroup.path.exists()


def test_a_failure_as_the_start_is_announced_leaves_no_command_running(tmp_path: Path, launchers: None):
    started: list[int] = []

    def coordinator_gone(pgid: int) -> None:
        started.append(pgid)
        raise BrokenPipeError("the coordinator is gone")

    with (tmp_path / "log").open("wb") as log, pytest.raises(BrokenPipeError):
        process.run_shell("sleep 600", tmp_path, dict(os.environ), log, 600.0, on_start=coordinator_gone)
    with pytest.raises(ProcessLookupError):
        os.kill(started[0], 0)
    assert step_launcher._pool.running == 0


def test_a_process_that_keeps_no_launcher_ready_starts_its_commands_itself(tmp_path: Path, launchers: None):
    step_launcher.discard_all()
    assert step_launcher.launch(["true"], tmp_path, {}) is None
    time.sleep(0.2)
    assert _ready() == []  # a coordinator's own commands start no launcher it would not use


def test_discarded_launchers_exit_and_their_cgroups_go(launchers: None):
    (waiting,) = _ready()
    step_launcher.discard_all()
    assert waiting.proc.poll() == 0  # it read end of file and left
    assert not waiting.cgroup.path.exists()


def _launch_in_child(cwd: str, answer: multiprocessing.SimpleQueue[bool]) -> None:
    launched = step_launcher.launch(["true"], Path(cwd), {})
    answer.put(launched is None)


def test_a_forked_child_does_not_take_its_parents_launcher(tmp_path: Path, launchers: None):
    (waiting,) = _ready()
    answer: multiprocessing.SimpleQueue[bool] = multiprocessing.get_context("fork").SimpleQueue()
    child = multiprocessing.get_context("fork").Process(target=_launch_in_child, args=(str(tmp_path), answer))
    child.start()
    child.join(timeout=60)
    assert answer.get() is True
    time.sleep(0.1)
    assert waiting.proc.poll() is None  # still waiting, for this process's next command
    assert _ready() == [waiting]


def _report_inherited_pipes(answer: multiprocessing.SimpleQueue[list[bool]]) -> None:
    (inherited, *_) = step_launcher._inherited[-1:] or [None]
    closed = [launcher.proc.stdin.closed for launcher in inherited.ready if launcher.proc.stdin] if inherited else []
    answer.put(closed)
    time.sleep(SAFETY_TIMEOUT_S)  # lives on while the parent discards its launcher


def test_a_long_lived_forked_child_holds_no_copy_of_the_parents_launcher_stdin(launchers: None):
    (waiting,) = _ready()
    context = multiprocessing.get_context("fork")
    answer: multiprocessing.SimpleQueue[list[bool]] = context.SimpleQueue()
    child = context.Process(target=_report_inherited_pipes, args=(answer,))
    child.start()
    try:
        assert answer.get() == [True]  # the child closed its copy of the one ready launcher's stdin at the fork
        step_launcher.discard_all()
        assert waiting.proc.returncode is not None
        assert not waiting.cgroup.path.exists()
    finally:
        child.kill()
        child.join()
