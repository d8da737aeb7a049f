"""RayExecutor on a real local Ray cluster: declared GPUs and custom resources, two nodes, lost workers and nodes.

One cluster serves the whole module (starting one costs seconds): a head node declaring 4 GPUs and a custom
GPU-model resource, and a second node with 2 GPUs, so steps also run on "another node" than the coordinator's.
Its processes see the module's cache and data dirs (fixed when the nodes start), the coordinator the test's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from bisect_helpers import synthetic_spec, wait_for_group_to_end
from synthetic import SyntheticHistory, culprit_history
from test_prune_build import BUILD as KERNEL_BUILD
from test_prune_build import CULPRIT as KERNEL_CULPRIT
from test_prune_build import kernel_history

from bisector.core.records import SearchRecords
from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.runner.coordinator import Coordinator
from bisector.vocab.domain import BisectStatus, ErrorKind, StepResult, Verdict
from bisector.vocab.errors import ExecutorError, InputError
from bisector.vocab.metric import MetricSpec
from bisector.vocab.paths import log_dir
from bisector.workers.executor import StepRequest
from bisector.workers.ray_sessions import remove_session

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from bisector.workers.ray_executor import RayExecutor  # noqa: E402  (needs Ray)

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray")]  # one local Ray cluster at a time

GPU_MODEL = "gpu_model_h200"
FAR = "far_node"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    node_home = tmp_path_factory.mktemp("ray-nodes")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("BISECT_CACHE_DIR", str(node_home / "cache"))
        env.setenv("BISECT_DATA_DIR", str(node_home / "data"))
        env.setenv("BISECT_TEST_NODE", "head")
        env.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        local = cluster_utils.Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 8,
                "num_gpus": 4,
                "resources": {GPU_MODEL: 4, "bisect_slot": 1},
                "include_dashboard": False,
            },
        )
        env.setenv("BISECT_TEST_NODE", "far")
        local.add_node(num_cpus=2, num_gpus=2, resources={FAR: 2})
    ray.init(address=local.address, log_to_driver=False, logging_level=logging.ERROR)
    local.node_home = node_home
    yield local
    session = Path(local.head_node.get_session_dir_path())  # every node's: they share it
    ray.shutdown()
    local.shutdown()
    remove_session(session)  # Ray leaves it under /tmp/ray


def step(history: SyntheticHistory, step_id: int, position: int, run: str, tmp_path: Path) -> StepRequest:
    return StepRequest(
        step_id=step_id, bisect_id=1, sha=history.shas[position], attempt=1, repo=str(history.path), run_cmd=run,
        metric=MetricSpec(), log_path=str(tmp_path / "logs" / f"step-{step_id}.log"), timeout_s=60,
    )  # fmt: skip


def wait_for(executor: RayExecutor, count: int, limit_s: float = 300) -> list[StepResult]:
    results: list[StepResult] = []
    deadline = time.monotonic() + limit_s
    while len(results) < count and time.monotonic() < deadline:
        results += executor.poll(0.2)
    return results


def ray_factory(made: list[RayExecutor], resources: dict[str, float] | None = None) -> Callable[[BisectSpec], object]:
    def factory(spec: BisectSpec) -> RayExecutor:
        made.append(RayExecutor(spec.repo, spec.executor.workers, spec.executor.gpus_per_step, resources or {}, None))
        return made[-1]

    return factory


def test_steps_run_on_the_gpus_ray_assigned(cluster, tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 6, 3)
    run = 'echo "cvd=$CUDA_VISIBLE_DEVICES pwd=$PWD counter=$(cat counter.txt)"'
    with RayExecutor(str(history.path), 2, 2, {GPU_MODEL: 1}, None) as executor:
        assignments = {i: executor.submit(step(history, i, i, run, tmp_path)) for i in (1, 2)}
        results = wait_for(executor, 2)
        info = executor.worker_info()
    assert sorted(len(a.gpus) for a in assignments.values()) == [2, 2]
    assert {g for a in assignments.values() for g in a.gpus} == {0, 1, 2, 3}
    for result in results:
        assert result.verdict is Verdict.GOOD
        gpus = ",".join(map(str, assignments[result.step_id].gpus))
        assert result.gpus == assignments[result.step_id].gpus
        assert info[result.worker].cuda_visible_devices == gpus  # what Ray set in the actor's process
        assert f"cvd={gpus} " in Path(result.log_path).read_text()
        assert f"counter={result.step_id}" in Path(result.log_path).read_text()
    assert len({i.worktree for i in info.values()}) == 2
    assert all(i.worktree.startswith(str(cluster.node_home / "cache")) for i in info.values())


def test_steps_of_0_gpus_ask_ray_for_none_and_see_none(cluster, tmp_path: Path):
    """More slots than the cluster has GPUs (8 against 6), each placed without one."""
    history = culprit_history(tmp_path / "repo", 8, 3)
    with RayExecutor(str(history.path), 8, 0, {}, None) as executor:
        assert executor.slots == 8
        info = executor.worker_info()
        for index in range(8):
            request = step(history, index + 1, index, 'echo "cvd=[${CUDA_VISIBLE_DEVICES-unset}]"', tmp_path)
            executor.submit(dataclasses.replace(request, no_gpu=True))  # as BisectSpec.step_request makes it
        results = wait_for(executor, 8)
    assert all(i.gpus == () for i in info.values())
    assert sorted(r.verdict for r in results) == [Verdict.GOOD] * 8
    for result in results:
        assert result.gpus == ()
        assert "cvd=[]\n" in Path(result.log_path).read_text()


def test_several_one_gpu_workers_share_a_node(cluster, tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 6, 3)
    with RayExecutor(str(history.path), 4, None, {GPU_MODEL: 1}, None) as executor:  # default: one GPU each
        info = executor.worker_info()
        assert sorted(g for i in info.values() for g in i.gpus) == [0, 1, 2, 3]
        assert len({i.node_id for i in info.values()}) == 1
        for index in range(4):
            executor.submit(step(history, index + 1, index, 'echo "cvd=$CUDA_VISIBLE_DEVICES"; sleep 1', tmp_path))
        assert executor.free_workers() == []
        results = wait_for(executor, 4)
    assert sorted(r.verdict for r in results) == [Verdict.GOOD] * 4
    for result in results:
        assert f"cvd={result.gpus[0]}\n" in Path(result.log_path).read_text()


def test_a_step_on_another_node_ships_its_log_back(cluster, tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 3, 2)
    with RayExecutor(str(history.path), 1, None, {FAR: 1}, None) as executor:
        (info,) = executor.worker_info().values()
        assert info.node_id != ray.get_runtime_context().get_node_id()
        assert len(info.gpus) == 1
        executor.submit(step(history, 5, 1, 'echo "on $BISECT_TEST_NODE"; bash test.sh', tmp_path))
        (result,) = wait_for(executor, 1)
    assert result.verdict is Verdict.GOOD
    assert result.log_path == str(tmp_path / "logs" / "step-5.log")
    assert "on far" in Path(result.log_path).read_text()
    node_copy = cluster.node_home / "data" / "ray-logs" / "bisect-1" / "step-5.log"
    assert node_copy.read_text() == Path(result.log_path).read_text()


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("strace") is None, reason="needs cc and strace")
def test_a_prune_probe_on_another_node_ships_its_files_back_and_prunes(cluster, tmp_path: Path, store: Store):
    shas = kernel_history(tmp_path / "repo")
    spec = synthetic_spec(tmp_path / "repo", shas[0], shas[-1], run=f"{sys.executable} bench.py", build=KERNEL_BUILD,
                          prune="auto", explain=False)  # fmt: skip
    record = Coordinator(store, ray_factory([], {FAR: 1}), poll_interval_s=0.05).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, shas[KERNEL_CULPRIT])
    plan = SearchRecords.from_extra(record.extra).pruning
    assert plan is not None
    assert plan.applied, plan.note
    assert "not traced" not in plan.note
    assert plan.removed() == {shas[i] for i in range(1, 40) if i != KERNEL_CULPRIT and i % 8}
    on_node = cluster.node_home / "data" / "ray-logs" / f"bisect-{record.id}" / "probe"  # the far node's
    shipped = log_dir(store.identity, record.id) / "probe"
    assert {"build.strace", "build.cwd"} <= {p.name for p in on_node.iterdir()}
    assert sorted(p.name for p in on_node.iterdir()) == sorted(p.name for p in shipped.iterdir())


def test_bisect_through_the_coordinator_names_the_culprit(cluster, tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 40, 23)
    made: list[RayExecutor] = []
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], workers=3)
    record = Coordinator(store, ray_factory(made, {GPU_MODEL: 1}), poll_interval_s=0.05).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[23])
    steps = store.steps(record.id)
    assert {s.worker for s in steps} <= {"ray-0", "ray-1", "ray-2"}
    assert all(len(s.gpus) == 1 for s in steps)
    assert all(s.verdict is not Verdict.ERROR for s in steps)


def kill_when_started(marker: Path, made: list[RayExecutor], how: str) -> threading.Thread:
    """Once the victim step wrote its actor's pid into marker, kill that actor (ray.kill) or its process."""

    def watch() -> None:
        deadline = time.monotonic() + 300  # only against a hang
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        pid = int(marker.read_text())
        executor = made[-1]
        (name,) = [name for name, worker_pid in executor.worker_pids().items() if worker_pid == pid]
        if how == "ray.kill":
            ray.kill(executor.actor_handles()[name])
        else:
            os.kill(pid, signal.SIGKILL)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


def victim_run(tmp_path: Path, condition: str) -> str:
    """The run command: the first step meeting condition announces its actor's pid, leaves a background
    child in its process group and hangs; every other step runs the synthetic test."""
    marker, group = tmp_path / "victim-pid", tmp_path / "victim-group"
    return (
        f"if {condition} && [ ! -e {marker} ]; then echo $$ > {group}; sleep 600 & "
        f"echo $PPID > {marker}.tmp && mv {marker}.tmp {marker}; sleep 60; fi; bash test.sh"
    )


def assert_no_survivor(tmp_path: Path) -> None:
    wait_for_group_to_end(int((tmp_path / "victim-group").read_text()), "the lost step's process group to end")


@pytest.mark.parametrize("how", ["ray.kill", "SIGKILL"])
def test_a_worker_lost_mid_step_is_retried_elsewhere(cluster, tmp_path: Path, store: Store, how: str):
    history = culprit_history(tmp_path / "repo", 12, 7)
    run = victim_run(tmp_path, '[ "$(cat counter.txt)" = 0 ]')  # the good endpoint, tested first
    made: list[RayExecutor] = []
    watcher = kill_when_started(tmp_path / "victim-pid", made, how)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=run, workers=2, verify_endpoints="first")
    record = Coordinator(store, ray_factory(made), poll_interval_s=0.05).start(spec)
    watcher.join(timeout=5)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[7]), record.message
    lost, retry = [s for s in store.steps(record.id) if s.sha == history.shas[0]]
    assert (lost.verdict, lost.error_kind) == (Verdict.ERROR, ErrorKind.WORKER_LOST)
    assert "was lost mid-step" in lost.detail
    assert (retry.verdict, retry.attempt) == (Verdict.GOOD, 2)
    assert retry.worker != lost.worker
    assert_no_survivor(tmp_path)


def test_a_node_lost_mid_step_is_retried_on_another(cluster, tmp_path: Path, store: Store):
    with pytest.MonkeyPatch.context() as env:  # what the doomed node's processes (and so the steps) see
        env.setenv("BISECT_TEST_NODE", "doomed")
        doomed = cluster.add_node(num_cpus=1, num_gpus=1, resources={"bisect_slot": 1})
    history = culprit_history(tmp_path / "repo", 12, 5)
    run = victim_run(tmp_path, '[ "$BISECT_TEST_NODE" = doomed ]')
    made: list[RayExecutor] = []
    marker = tmp_path / "victim-pid"

    def remove_when_started() -> None:
        deadline = time.monotonic() + 300  # only against a hang
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        cluster.remove_node(doomed, allow_graceful=False)

    remover = threading.Thread(target=remove_when_started, daemon=True)
    remover.start()
    # One slot per node: the head offers one "bisect_slot", the doomed node the other. Both endpoints run first: an
    # endpoint check (whichever lands on the doomed node) always matters, so it is lost, never cancelled.
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=run, workers=2, verify_endpoints="first")
    record = Coordinator(store, ray_factory(made, {"bisect_slot": 1}), poll_interval_s=0.05).start(spec)
    remover.join(timeout=5)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[5])
    lost = [s for s in store.steps(record.id) if s.verdict is Verdict.ERROR]
    assert [s.error_kind for s in lost] == [ErrorKind.WORKER_LOST]
    retries = [s for s in store.steps(record.id) if s.sha == lost[0].sha and s.id != lost[0].id]
    assert [s.worker != lost[0].worker and s.verdict.decides for s in retries] == [True]
    assert_no_survivor(tmp_path)


def test_a_lost_slot_comes_back_then_is_retired(cluster, tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 3, 2)
    with RayExecutor(str(history.path), 1, None, {}, None, max_restarts=1) as executor:
        first_pid = executor.worker_pids()["ray-0"]
        executor.submit(step(history, 1, 0, "sleep 60", tmp_path))
        os.kill(first_pid, signal.SIGKILL)
        (lost,) = wait_for(executor, 1)
        assert (lost.verdict, lost.error_kind, lost.worker) == (Verdict.ERROR, ErrorKind.WORKER_LOST, "ray-0")
        assert executor.free_workers() == ["ray-0"]  # waits for the fresh actor
        assert executor.worker_pids()["ray-0"] != first_pid
        executor.submit(step(history, 2, 0, "bash test.sh", tmp_path))
        (again,) = wait_for(executor, 1)
        assert again.verdict is Verdict.GOOD
        executor.submit(step(history, 3, 0, "sleep 60", tmp_path))
        ray.kill(executor.actor_handles()["ray-0"])
        (lost_again,) = wait_for(executor, 1)
        assert "retired" in lost_again.detail
        assert executor.retired_workers() == ["ray-0"]
        with pytest.raises(ExecutorError, match="was lost 2 times"):
            executor.free_workers()


def test_a_runner_that_raises_is_a_harness_error_and_the_actor_lives_on(cluster, tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    broken = replace(step(history, 1, 0, "true", tmp_path), metric=None)  # the runner trips over it
    with RayExecutor(str(history.path), 1, None, {}, None) as executor:
        pid = executor.worker_pids()["ray-0"]
        executor.submit(broken)
        (result,) = wait_for(executor, 1)
        assert (result.verdict, result.error_kind) == (Verdict.ERROR, ErrorKind.HARNESS)
        assert result.detail.startswith("step runner failed: AttributeError")
        executor.submit(step(history, 2, 0, "bash test.sh", tmp_path))
        (again,) = wait_for(executor, 1)
        assert again.verdict is Verdict.GOOD
        assert executor.worker_pids()["ray-0"] == pid


def wait_for_file(path: Path, limit_s: float = 300) -> None:
    """Wait on the event itself (a file the step writes); limit_s only guards against a hang."""
    deadline = time.monotonic() + limit_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_cancel_stops_a_running_step_and_its_process_group(cluster, tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    group, running = tmp_path / "group", tmp_path / "running"
    with RayExecutor(str(history.path), 1, 1, {}, None) as executor:
        executor.submit(step(history, 7, 0, f"echo $$ > {group}; sleep 600 & touch {running}; sleep 60", tmp_path))
        wait_for_file(running)
        executor.cancel(7)
        (result,) = wait_for(executor, 1)
    assert result.verdict is Verdict.CANCELLED  # not the GOOD of a sleep that ran its 60 s
    assert result.run_s > 0  # the time it held its GPU is counted
    wait_for_group_to_end(int(group.read_text()), "the background child of the cancelled step to end")


def test_slots_the_cluster_cannot_place_yet_join_later(cluster, tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    with RayExecutor(str(history.path), 5, 1, {GPU_MODEL: 1}, None, start_grace_s=0.0) as executor:
        assert executor.slots == 5  # the start returned once one slot was up
        deadline = time.monotonic() + 300  # only against a hang: the event waited on is four slots up
        while len(executor.free_workers()) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(executor.free_workers()) == 4  # the head has 4 GPUs of that model; the fifth waits


def test_resources_no_node_offers_fail_with_one_line(cluster, tmp_path: Path):
    with pytest.raises(ExecutorError, match=r"placed none of the 1 worker.*gpu_model_h200 5.*gpu_model_h200 4"):
        RayExecutor(str(tmp_path), 1, 1, {GPU_MODEL: 5}, None, start_timeout_s=1.0)
    with pytest.raises(InputError, match="--gpus-per-step"):
        RayExecutor(str(tmp_path), 1, 1, {"GPU": 2}, None)


def test_an_unreachable_cluster_is_one_line_error(tmp_path: Path):
    code = (
        "from bisector.vocab.errors import ExecutorError\n"
        "from bisector.workers.ray_executor import RayExecutor\n"
        "try:\n    RayExecutor('.', 1, None, {}, '127.0.0.1:9')\n"
        "except ExecutorError as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == "cannot reach the Ray cluster at 127.0.0.1:9: Connection refused"
