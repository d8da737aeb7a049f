"""A container build whose worker is SIGKILLed mid-RUN: the dead worker's reaper (LocalExecutor's, the Ray actor's,
or, after a SIGKILL of the whole job, the next step's sweep of dead workers' cgroups) kills the RUN step (which
podman runs in a session and a cgroup of its own) before the build's process group, and podman, relayed past its
dead reader and given the time to wind down, removes its working container. Real podman; the RUN step either quiet
or printing (a worker's death then breaks the build's output pipe)."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from bisect_helpers import wait_for
from cgroup_helpers import cgroup_v2_writable, in_cgroup, isolated_cgroup
from endless_build import EndlessBuild, endless_build
from image_repo import commit, init_repo

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.vocab.metric import MetricSpec
from bisector.workers.executor import Executor, StepRequest
from bisector.workers.local import LocalExecutor

pytestmark = pytest.mark.containers

STOPPED_WITHIN_S = 120  # a safety bound: before, the RUN step ran forever and its working container stayed
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file a printing RUN step appends a line to each time it prints one (its folder mounted at /count)."""
    folder = tmp_path / "count"
    folder.mkdir()
    (folder / "ticks").touch()
    build_args = os.environ.get("BISECT_CONTAINER_BUILD_ARGS", "")
    monkeypatch.setenv("BISECT_CONTAINER_BUILD_ARGS", f"{build_args} --volume {folder}:/count")
    return folder / "ticks"


def printed_on(ticks: Path, build: EndlessBuild, lines: int = 20) -> None:
    """Wait until the RUN step printed that many more lines: podman had output for its dead reader. A step that
    another test starts meanwhile (xdist) may reap the dead worker's cgroup, RUN step included, first: then there
    is nothing left to print, and the checks after this one still hold."""
    printed = len(ticks.read_text().splitlines())
    wait_for(
        lambda: len(ticks.read_text().splitlines()) >= printed + lines or not build.running(),
        what="the RUN step to print on",
    )


def kill_worker_mid_run(
    executor: Executor, worker_pids: Callable[[], Mapping[str, int | None]], build: EndlessBuild, tmp_path: Path,
    template: str, *, ticks: Path | None = None,
) -> StepResult:  # fmt: skip
    """Submit the build, SIGKILL its worker once the RUN step runs; the step's result. With ticks, the executor
    hears of the loss only after the RUN step printed on."""
    executor.submit(build.request(template, tmp_path / "step.log"))
    wait_for(lambda: bool(build.running()), what="the build's RUN step to run")
    (worker_pid,) = worker_pids().values()
    assert worker_pid is not None
    os.kill(worker_pid, signal.SIGKILL)
    if ticks is not None:
        printed_on(ticks, build)
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


def test_a_local_worker_killed_mid_run_leaves_no_run_step_and_no_working_container(podman: str, tmp_path: Path):
    with endless_build(tmp_path / "repo") as build:
        with LocalExecutor(str(build.repo), workers=1) as executor:
            kill_worker_mid_run(executor, executor.worker_pids, build, tmp_path, podman)
            assert build.running() == []  # ended before the loss was reported, as a dead worker's test is
        assert_nothing_left(build)


def test_a_local_worker_killed_mid_run_of_a_printing_build_leaves_nothing(podman: str, tmp_path: Path, ticks: Path):
    with endless_build(tmp_path / "repo", chatty=True) as build:
        with LocalExecutor(str(build.repo), workers=1) as executor:
            kill_worker_mid_run(executor, executor.worker_pids, build, tmp_path, podman, ticks=ticks)
            assert build.running() == []
        assert_nothing_left(build)


# Another bisect's worker on this host: plain steps (argv[1], pickled) one after another, each of which sweeps the
# cgroups of dead workers as it starts; a line per verdict to argv[2].
NEIGHBOUR = textwrap.dedent(
    """
    import dataclasses, itertools, pickle, sys
    from pathlib import Path
    from bisector.workers.local import LocalExecutor

    request = pickle.loads(Path(sys.argv[1]).read_bytes())
    with LocalExecutor(request.repo, workers=1) as executor, open(sys.argv[2], "a") as verdicts:
        for step_id in itertools.count(1):
            executor.submit(dataclasses.replace(request, step_id=step_id))
            results = []
            while not results:
                results = executor.poll(0.5)
            print(results[0].verdict.value, file=verdicts, flush=True)
    """
)


@contextlib.contextmanager
def neighbour_bisect(tmp_path: Path) -> Iterator[Path]:
    """A process beside this test (same cgroup) running another bisect's steps until the block ends; the file of its
    verdicts."""
    repo = tmp_path / "neighbour"
    init_repo(repo)
    sha = commit(repo, "a plain step", {"test.sh": "true\n"})
    step = StepRequest(
        step_id=1, bisect_id=2, sha=sha, attempt=1, repo=str(repo), run_cmd="bash test.sh", metric=MetricSpec(),
        log_path=str(tmp_path / "neighbour.log"), timeout_s=600,
    )  # fmt: skip
    (tmp_path / "neighbour.pickle").write_bytes(pickle.dumps(step))
    verdicts = tmp_path / "neighbour-verdicts"
    verdicts.touch()
    process = subprocess.Popen(
        [sys.executable, "-c", NEIGHBOUR, str(tmp_path / "neighbour.pickle"), str(verdicts)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: bool(verdicts.read_text()), what="the neighbour's first step")
        yield verdicts
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()


def test_a_worker_killed_mid_run_beside_another_bisects_steps_leaves_nothing(podman: str, tmp_path: Path, ticks: Path):
    """Each step the neighbour starts sweeps dead workers' cgroups: it must leave the dead worker's to its reaper
    (LocalExecutor) rather than end it at once, which killed podman while it removed its working container."""
    if not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 here: no step sweeps a dead worker's cgroup")
    with endless_build(tmp_path / "repo", chatty=True) as build, neighbour_bisect(tmp_path) as verdicts:
        with LocalExecutor(str(build.repo), workers=1) as executor:
            kill_worker_mid_run(executor, executor.worker_pids, build, tmp_path, podman, ticks=ticks)
            assert build.running() == []
            swept_at = len(verdicts.read_text().split())
        assert_nothing_left(build)
        wait_for(lambda: len(verdicts.read_text().split()) > swept_at + 1, what="the neighbour's steps to go on")
    assert set(verdicts.read_text().split()) == {Verdict.GOOD.value}


@pytest.mark.ray
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time
def test_a_ray_actor_killed_mid_run_leaves_no_run_step_and_no_working_container(
    podman: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    pytest.importorskip("ray")
    from bisector.workers.ray_executor import RayExecutor

    # What the local cluster's processes (the actor) see: this checkout, the test's cache dir (fixed at its start).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    from bisector.workers.ray_sessions import remove_session

    session = None
    try:
        with endless_build(tmp_path / "repo", chatty=True) as build, RayExecutor(str(build.repo), 1) as executor:
            session = executor.local_session()
            kill_worker_mid_run(executor, executor.worker_pids, build, tmp_path, podman)
            assert_nothing_left(build)
    finally:
        if session is not None:
            remove_session(session)  # a lost worker keeps its cluster's session folder (Ray's logs) for a person


# A coordinator with one worker, running the pickled step request (argv[1]); its worker's pid goes to argv[2].
DRIVER = textwrap.dedent(
    """
    import pickle, sys
    from pathlib import Path
    from bisector.workers.local import LocalExecutor

    request = pickle.loads(Path(sys.argv[1]).read_bytes())
    executor = LocalExecutor(request.repo, workers=1)
    executor.submit(request)
    Path(sys.argv[2]).write_text(" ".join(str(pid) for pid in executor.worker_pids().values()))
    while True:
        executor.poll(1.0)
    """
)


# The next step beside it: one plain step (argv[1], pickled) in a fresh executor; prints its verdict.
NEXT_STEP = textwrap.dedent(
    """
    import pickle, sys
    from pathlib import Path
    from bisector.workers.local import LocalExecutor

    request = pickle.loads(Path(sys.argv[1]).read_bytes())
    with LocalExecutor(request.repo, workers=1) as executor:
        executor.submit(request)
        results = []
        while not results:
            results = executor.poll(0.5)
    print(results[0].verdict.value)
    """
)


def test_a_build_orphaned_by_a_whole_job_killed_mid_run_ends_at_the_next_step(podman: str, tmp_path: Path, ticks: Path):
    """SIGKILL to the coordinator's whole group: its worker dies with it and cannot end its build; the next worker
    that starts a step beside it (in the same cgroup) ends the RUN step, and podman removes its working container."""
    if not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 here: a build orphaned by a SIGKILLed job runs on, as a test would")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    other = tmp_path / "other"
    init_repo(other)
    other_sha = commit(other, "a plain step", {"test.sh": "true\n"})
    with endless_build(tmp_path / "repo", chatty=True) as build, isolated_cgroup() as cgroup:
        (tmp_path / "request.pickle").write_bytes(pickle.dumps(build.request(podman, tmp_path / "step.log")))
        workers = tmp_path / "workers"
        driver = subprocess.Popen(
            in_cgroup(cgroup, [sys.executable, "-c", DRIVER, str(tmp_path / "request.pickle"), str(workers)]),
            env=env, start_new_session=True,
        )  # fmt: skip
        wait_for(lambda: bool(build.running()) and workers.exists(), what="the build's RUN step to run")
        os.killpg(driver.pid, signal.SIGKILL)  # coordinator and worker at once
        driver.wait()
        printed_on(ticks, build)
        assert build.running(), "the build ended with its job"  # orphaned, until the next step beside it
        step = StepRequest(
            step_id=2, bisect_id=2, sha=other_sha, attempt=1, repo=str(other), run_cmd="bash test.sh",
            metric=MetricSpec(), log_path=str(tmp_path / "next.log"), timeout_s=600,
        )  # fmt: skip
        (tmp_path / "next.pickle").write_bytes(pickle.dumps(step))
        next_step = subprocess.run(
            in_cgroup(cgroup, [sys.executable, "-c", NEXT_STEP, str(tmp_path / "next.pickle")]),
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert next_step.stdout.split() == [Verdict.GOOD.value], next_step.stderr
        assert_nothing_left(build)
