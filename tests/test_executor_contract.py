"""The Executor contract (workers/executor.py), the same test for every executor: each submitted step is reported
exactly once — finished, cancelled (while it runs or before it starts), given up on (abandon), or lost with its
worker — and the slot serves the next step.

Every case runs real steps (a real git repository, real worker processes or actors, real shell commands). To add
an executor, add an ExecutorCase to CASES: how to make it for a repository and W workers, and how to kill the
worker process that runs a step (None where a worker cannot be lost, as a thread cannot). A case with an image
runs every step on its commit's venv image (on Ray: the test in an actor started with the image's python).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bisect_helpers import wait_for
from synthetic import SyntheticHistory, culprit_history

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.vocab.metric import MetricSpec
from bisector.workers.executor import Assignment, Executor, StepRequest
from bisector.workers.images.key import ImageRecipe
from bisector.workers.inprocess import InProcessExecutor
from bisector.workers.local import LocalExecutor
from bisector.workers.ray_sessions import remove_session

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 2
SAFETY_S = 300.0  # only against a hang: nothing here depends on how fast a step runs
LONG = "sleep 600"  # a step that would finish (GOOD) only if the executor failed to stop it


@dataclass(frozen=True)
class ExecutorCase:
    name: str
    make: Callable[[pytest.FixtureRequest, str, int], Executor]
    kill_worker: Callable[[Executor, str], None] | None  # kill the process that runs this worker's steps
    image: ImageRecipe | None = None  # the steps' image recipe


def make_local(request: pytest.FixtureRequest, repo: str, workers: int) -> Executor:
    return LocalExecutor(repo, workers)


def make_inprocess(request: pytest.FixtureRequest, repo: str, workers: int) -> Executor:
    return InProcessExecutor(repo, workers)


def make_ray(request: pytest.FixtureRequest, repo: str, workers: int) -> Executor:
    request.getfixturevalue("ray_cluster")
    from bisector.workers.ray_executor import RayExecutor

    return RayExecutor(repo, workers, None, {}, None)


def kill_pid_of(executor: Executor, worker: str) -> None:
    pids: dict[str, int | None] = executor.worker_pids()  # type: ignore[attr-defined]
    pid = pids[worker]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)


RAY = [pytest.mark.ray, pytest.mark.xdist_group("ray")]  # one local Ray cluster at a time
CASES = [
    pytest.param(ExecutorCase("local", make_local, kill_pid_of), id="local"),
    pytest.param(ExecutorCase("inprocess", make_inprocess, None), id="inprocess"),
    pytest.param(ExecutorCase("ray", make_ray, kill_pid_of), id="ray", marks=RAY),
    pytest.param(ExecutorCase("ray-image", make_ray, kill_pid_of, ImageRecipe("venv")), id="ray-image", marks=RAY),
]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A local Ray cluster for the module; its processes see the module's cache and data dirs."""
    ray = pytest.importorskip("ray")
    node_home = tmp_path_factory.mktemp("ray-node")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("BISECT_CACHE_DIR", str(node_home / "cache"))
        env.setenv("BISECT_DATA_DIR", str(node_home / "data"))
        env.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        context = ray.init(  # "local": never join a cluster another test run on this host recorded in /tmp/ray
            address="local", num_cpus=2 * WORKERS, num_gpus=0, include_dashboard=False, log_to_driver=False
        )
    yield
    ray.shutdown()
    remove_session(Path(context.address_info["session_dir"]))  # Ray leaves it under /tmp/ray


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest) -> ExecutorCase:
    return request.param  # type: ignore[no-any-return]


class Harness:
    """Submits steps and keeps every result an executor reports, so that a second report of a step shows."""

    def __init__(self, executor: Executor, history: SyntheticHistory, logs: Path, image: ImageRecipe | None) -> None:
        self.executor, self.history, self.logs, self.image = executor, history, logs, image
        self.reported: list[StepResult] = []
        self.assigned: dict[int, Assignment] = {}
        self._next_id = 1

    def submit(self, run: str, position: int = 0, worker: str = "") -> int:
        step_id, self._next_id = self._next_id, self._next_id + 1
        request = StepRequest(
            step_id=step_id, bisect_id=1, sha=self.history.shas[position], attempt=1, repo=str(self.history.path),
            run_cmd=run, metric=MetricSpec(), log_path=str(self.logs / f"step-{step_id}.log"), timeout_s=SAFETY_S,
            pin_worker=worker, image=self.image,
        )  # fmt: skip
        self.assigned[step_id] = self.executor.submit(request)
        return step_id

    def until_reported(self, *step_ids: int) -> dict[int, StepResult]:
        deadline = time.monotonic() + SAFETY_S
        while not set(step_ids) <= {r.step_id for r in self.reported}:
            assert time.monotonic() < deadline, f"steps {step_ids} were never reported"
            self.reported += self.executor.poll(0.2)
        return {r.step_id: r for r in self.reported if r.step_id in step_ids}

    def started(self, step_id: int) -> Path:
        return self.logs / f"started-{step_id}"

    def every_worker_serves_once_more(self) -> None:
        """One more step on every worker, run to its end: by then a late or second report of an earlier step would
        have come back too. Then every submitted step must have been reported exactly once."""
        wait_for(
            lambda: sorted(self.executor.free_workers()) == sorted(self.executor.worker_names()),
            timeout_s=SAFETY_S, what="every worker to be free",
        )  # fmt: skip
        last = [self.submit("bash test.sh", worker=worker) for worker in self.executor.worker_names()]
        finals = self.until_reported(*last)
        assert {finals[i].verdict for i in last} == {Verdict.GOOD}
        if self.image is not None:  # the test ran in the image's interpreter
            assert all("/venv/bin/python (pid" in Path(finals[i].log_path).read_text() for i in last)
        counts = Counter(r.step_id for r in self.reported)
        assert counts == Counter(list(self.assigned)), "each submitted step reported exactly once"
        assert self.executor.poll(0) == []


@pytest.fixture
def harness(case: ExecutorCase, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    history = culprit_history(tmp_path / "repo", 6, 3)
    (tmp_path / "logs").mkdir()
    with case.make(request, str(history.path), WORKERS) as executor:
        yield Harness(executor, history, tmp_path / "logs", case.image)


def long_step(harness: Harness, step_id_hint: int) -> str:
    """A step that says when its command runs, then would run for minutes."""
    return f"touch {harness.started(step_id_hint)}; {LONG}"


def test_finished_steps_are_reported_once(harness: Harness):
    good, bad = harness.submit("bash test.sh", position=1), harness.submit("bash test.sh", position=4)
    results = harness.until_reported(good, bad)
    assert (results[good].verdict, results[bad].verdict) == (Verdict.GOOD, Verdict.BAD)
    assert {results[good].worker, results[bad].worker} == {a.worker for a in harness.assigned.values()}
    harness.executor.cancel(good)  # a cancel that comes after the result changes nothing
    harness.every_worker_serves_once_more()


def test_a_step_cancelled_while_running_is_reported_once_as_cancelled(harness: Harness):
    running = harness.submit(long_step(harness, 1))
    other = harness.submit("bash test.sh", position=4)
    wait_for(harness.started(running).exists, timeout_s=SAFETY_S, what="the step's command to start")
    harness.executor.cancel(running)
    results = harness.until_reported(running, other)
    assert results[running].verdict is Verdict.CANCELLED
    assert results[other].verdict is Verdict.BAD
    harness.every_worker_serves_once_more()


def test_a_step_cancelled_before_it_starts_is_reported_once_as_cancelled(harness: Harness):
    steps = [harness.submit(long_step(harness, i + 1)) for i in range(WORKERS)]
    for step_id in steps:  # at once: the workers have not started them, or only just
        harness.executor.cancel(step_id)
    results = harness.until_reported(*steps)
    assert [results[step_id].verdict for step_id in steps] == [Verdict.CANCELLED] * WORKERS
    harness.every_worker_serves_once_more()


def test_an_abandoned_step_is_reported_once(harness: Harness):
    hung = harness.submit(long_step(harness, 1))
    wait_for(harness.started(hung).exists, timeout_s=SAFETY_S, what="the step's command to start")
    harness.executor.abandon(hung)
    (result,) = harness.until_reported(hung).values()
    assert result.verdict in (Verdict.CANCELLED, Verdict.ERROR)
    if result.verdict is Verdict.ERROR:
        assert result.error_kind is ErrorKind.WORKER_LOST
    harness.every_worker_serves_once_more()


def test_a_step_whose_worker_is_killed_is_reported_once_as_lost(harness: Harness, case: ExecutorCase):
    if case.kill_worker is None:
        pytest.skip(f"{case.name} runs steps on threads of this process: no worker of its can be lost alone")
    doomed = harness.submit(long_step(harness, 1))
    other = harness.submit("bash test.sh", position=1)
    wait_for(harness.started(doomed).exists, timeout_s=SAFETY_S, what="the step's command to start")
    case.kill_worker(harness.executor, harness.assigned[doomed].worker)
    results = harness.until_reported(doomed, other)
    assert (results[doomed].verdict, results[doomed].error_kind) == (Verdict.ERROR, ErrorKind.WORKER_LOST)
    assert results[doomed].worker == harness.assigned[doomed].worker
    assert results[other].verdict is Verdict.GOOD
    harness.every_worker_serves_once_more()
