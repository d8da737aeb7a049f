"""A container build whose worker is SIGKILLed mid-RUN: the dead worker's reaper (LocalExecutor's, the Ray actor's)
kills the RUN step (which podman runs in a session and a cgroup of its own) before the build's process group, and
podman, relayed past its dead reader and given the time to wind down, removes its working container. Real podman;
the RUN step either quiet or printing (a worker's death then breaks the build's output pipe)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from bisect_helpers import wait_for
from endless_build import EndlessBuild, endless_build

from vocab.domain import ErrorKind, StepResult, Verdict
from workers.executor import Executor
from workers.local import LocalExecutor

STOPPED_WITHIN_S = 120  # a safety bound: before, the RUN step ran forever and its working container stayed
ROOT = Path(__file__).resolve().parents[2]


def kill_worker_mid_run(
    executor: Executor, worker_pids: Callable[[], Mapping[str, int | None]], build: EndlessBuild, tmp_path: Path,
    template: str, *, ticks: Path | None = None,
) -> StepResult:  # fmt: skip
    """Submit the build, SIGKILL its worker once the RUN step runs; the step's result. With ticks (the file a chatty
    RUN step appends a line to each time it prints one), the executor hears of the loss only after the RUN step
    printed 20 more lines: podman had output for its dead reader."""
    executor.submit(build.request(template, tmp_path / "step.log"))
    wait_for(lambda: bool(build.running()), what="the build's RUN step to run")
    (worker_pid,) = worker_pids().values()
    assert worker_pid is not None
    os.kill(worker_pid, signal.SIGKILL)
    if ticks is not None:
        printed = len(ticks.read_text().splitlines())
        wait_for(lambda: len(ticks.read_text().splitlines()) >= printed + 20, what="the RUN step to print on")
    results: list[StepResult] = []
    deadline = time.monotonic() + 600
    while not results and time.monotonic() < deadline:
        results += executor.poll(0.5)
    (result,) = results
    assert (result.verdict, result.error_kind) == (Verdict.ERROR, ErrorKind.WORKER_LOST), result.detail
    return result


def assert_nothing_left(build: EndlessBuild) -> None:
    wait_for(lambda: not build.running(), STOPPED_WITHIN_S, "the RUN step to end with its dead worker's build")
    wait_for(lambda: not build.working_containers(), STOPPED_WITHIN_S, "podman to remove its working container")


@pytest.mark.parametrize("chatty", [False, True], ids=["quiet", "printing"])
def test_a_local_worker_killed_mid_run_leaves_no_run_step_and_no_working_container(
    podman: str, tmp_path: Path, chatty: bool, monkeypatch: pytest.MonkeyPatch
):
    ticks = None
    if chatty:  # the RUN step counts its lines in a mounted folder
        (tmp_path / "count").mkdir()
        ticks = tmp_path / "count" / "ticks"
        ticks.touch()
        build_args = os.environ.get("BISECT_CONTAINER_BUILD_ARGS", "")
        monkeypatch.setenv("BISECT_CONTAINER_BUILD_ARGS", f"{build_args} --volume {tmp_path / 'count'}:/count")
    with endless_build(tmp_path / "repo", chatty=chatty) as build:
        with LocalExecutor(str(build.repo), workers=1) as executor:
            kill_worker_mid_run(executor, executor.worker_pids, build, tmp_path, podman, ticks=ticks)
            assert build.running() == []  # ended before the loss was reported, as a dead worker's test is
        assert_nothing_left(build)


@pytest.mark.ray
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time
def test_a_ray_actor_killed_mid_run_leaves_no_run_step_and_no_working_container(
    podman: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    pytest.importorskip("ray")
    from workers.ray_executor import RayExecutor

    # What the local cluster's processes (the actor) see: this checkout, the test's cache dir (fixed at its start).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with endless_build(tmp_path / "repo", chatty=True) as build, RayExecutor(str(build.repo), 1) as executor:
        kill_worker_mid_run(executor, executor.worker_pids, build, tmp_path, podman)
        assert_nothing_left(build)
