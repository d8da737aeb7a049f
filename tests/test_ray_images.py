"""Worker images on a real two-node local Ray cluster: a step runs inside its image's venv on either node, its
runner in the image's interpreter (runtime_env py_executable), an image built on one node serves the other through
a cache root both mount ($BISECT_IMAGE_ROOT), and without one, steps prefer the node that holds their image.

Each node has a cache dir of its own (as separate machines would), so without a shared root nothing is shared, and
declares GPUs (none are real): a step's slot holds one, its image's runner none, and the test sees the slot's.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest
from bisect_helpers import wait_for
from images.image_repo import RUN_CMD, ImageRepo, image_request, make_image_repo

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.workers.build_ahead import AheadStatus
from bisector.workers.executor import StepRequest
from bisector.workers.images.cache import IMAGE_ROOT_ENV, ImageCache, ImageManifest, ImageStatus, now_iso
from bisector.workers.images.transfer import CHUNK_BYTES, CopyStoppedError
from bisector.workers.ray_sessions import remove_session

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from bisector.workers.ray_cluster import CONTROL_GROUP  # noqa: E402
from bisector.workers.ray_executor import RayExecutor  # noqa: E402  (needs Ray)
from bisector.workers.ray_image_peer import IMAGES_GROUP, ImageHolder, RayImagePeer  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    pytest.mark.xdist_group("ray"),  # one local Ray cluster at a time
    pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)"),
]
ROOT = Path(__file__).resolve().parents[1]
SLOT = "image_slot"  # each node offers one: a two-slot executor has one worker per node
SAFETY_S = 300.0  # only against a hang
# The process that runs the step's test (the shell's parent), and the GPUs the test sees.
RUNNER = 'echo "runner pid=$PPID cvd=$CUDA_VISIBLE_DEVICES"'
SEED_PTH = "_gpu_bisect_base.pth"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    homes = tmp_path_factory.mktemp("ray-image-nodes")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        env.delenv(IMAGE_ROOT_ENV, raising=False)
        env.setenv("BISECT_CACHE_DIR", str(homes / "head" / "cache"))
        env.setenv("BISECT_DATA_DIR", str(homes / "head" / "data"))
        local = cluster_utils.Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 2, "num_gpus": 2, "resources": {SLOT: 1}, "include_dashboard": False},
        )
        env.setenv("BISECT_CACHE_DIR", str(homes / "far" / "cache"))
        env.setenv("BISECT_DATA_DIR", str(homes / "far" / "data"))
        local.add_node(num_cpus=2, num_gpus=1, resources={SLOT: 1})  # declared GPUs: one per step
    ray.init(address=local.address, log_to_driver=False, logging_level=logging.ERROR)
    yield homes
    session = Path(local.head_node.get_session_dir_path())  # every node's: they share it
    ray.shutdown()
    local.shutdown()
    remove_session(session)  # Ray leaves it under /tmp/ray


@pytest.fixture
def repo(tmp_path: Path) -> ImageRepo:
    return make_image_repo(tmp_path / "repo")


def run(executor: RayExecutor, request: StepRequest, verdict: Verdict = Verdict.GOOD) -> StepResult:
    executor.submit(request)
    result = wait_result(executor, request.step_id)
    assert result.verdict is verdict, result.detail  # test.sh asserts it runs on the image's venv python
    return result


def wait_result(executor: RayExecutor, step_id: int) -> StepResult:
    deadline = time.monotonic() + SAFETY_S
    results: list[StepResult] = []
    while not results:
        assert time.monotonic() < deadline, f"step {step_id} never came back"
        results = executor.poll(0.2)
    (result,) = results
    assert result.step_id == step_id
    return result


def runner_of(result: StepResult) -> str:
    """The interpreter of the image's runner that ran the step's test (RUNNER checks its pid), named as the image's
    own (it ran from the test's copy of the image's venv), or "" when none did (the slot's actor ran it)."""
    log = Path(result.log_path).read_text()
    (test_parent,) = re.findall(r"^runner pid=(\d+) ", log, re.MULTILINE)
    gpus = ",".join(map(str, result.gpus))
    assert f"runner pid={test_parent} cvd={gpus}\n" in log  # the slot's GPUs, which its actor holds
    runners = re.findall(r"^# runner (\S+) \(pid (\d+)\)$", log, re.MULTILINE)
    assert [pid for _, pid in runners] in ([], [test_parent])
    if not runners:
        return ""
    copy = re.fullmatch(r"(.+)/runs/run-[^/]+/venv/bin/python", runners[0][0])
    assert copy is not None, runners  # the python of the test's own copy of the image's venv
    return f"{copy[1]}/venv/bin/python"


def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie that its new parent has not reaped yet counts)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def workers_by_node(executor: RayExecutor) -> tuple[str, str]:
    """(the worker on the coordinator's node, the worker on the other)."""
    here = ray.get_runtime_context().get_node_id()
    info = executor.worker_info()
    assert len({i.node_id for i in info.values()}) == 2
    (near,) = [name for name, i in info.items() if i.node_id == here]
    (far,) = [name for name, i in info.items() if i.node_id != here]
    return near, far


def test_an_image_built_on_one_node_serves_the_other_through_a_shared_root(cluster, repo, tmp_path: Path):
    shared, builds = tmp_path / "shared-images", tmp_path / "builds"
    with RayExecutor(str(repo.path), 2, None, {SLOT: 1}, None, image_root=str(shared)) as executor:
        near, far = workers_by_node(executor)
        request = image_request(repo.path, repo.shas[0], tmp_path, 1, BUILD_COUNTER=str(builds))
        request = replace(request, run_cmd=f"{RUNNER}; {RUN_CMD}")
        built = run(executor, replace(request, pin_worker=far))
        reused = run(executor, replace(request, step_id=2, log_path=str(tmp_path / "2.log"), pin_worker=near))
    assert built.image is not None
    assert reused.image is not None
    assert (built.image.source, reused.image.source, reused.image.reused) == ("built", "cache", True)
    assert reused.image.id == built.image.id
    assert Path(reused.image.path).parent == shared
    assert builds.read_text().splitlines() == ["build at 0"]
    assert not (cluster / "far" / "cache" / "images" / built.image.id).exists()
    python = str(shared / built.image.id / "venv" / "bin" / "python")
    assert (runner_of(built), runner_of(reused)) == (python, python)  # on both nodes, the image's interpreter
    assert (len(built.gpus), len(reused.gpus)) == (1, 1)


def test_without_a_shared_root_steps_prefer_the_node_with_the_image_and_another_node_copies_it(
    cluster, repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(IMAGE_ROOT_ENV, raising=False)
    builds = tmp_path / "builds"
    with RayExecutor(str(repo.path), 2, None, {SLOT: 1}, None) as executor:
        near, far = workers_by_node(executor)
        first = image_request(repo.path, repo.shas[0], tmp_path, 1, BUILD_COUNTER=str(builds))
        built = run(executor, replace(first, pin_worker=far))
        assert built.image is not None
        assert Path(built.image.path).parent == cluster / "far" / "cache" / "images"
        # the next commit changed only its README: the same image, which only the far node holds
        second = image_request(repo.path, repo.shas[1], tmp_path, 2, BUILD_COUNTER=str(builds))
        assert executor.prefer_workers(second, [near, far]) == [far, near]
        assert executor.prefer_workers(second, [far, near]) == [far, near]
        placed = run(executor, second)  # unpinned, both workers free
        assert (placed.worker, placed.image is not None and placed.image.reused) == (far, True)
        third = replace(
            second, step_id=3, log_path=str(tmp_path / "3.log"), pin_worker=near, run_cmd=f"{RUNNER}; {RUN_CMD}"
        )
        elsewhere = run(executor, third)  # copied from the far node's actor, not built again
        again = run(executor, replace(third, step_id=4, log_path=str(tmp_path / "4.log")))
    assert elsewhere.image is not None
    assert (elsewhere.image.source, elsewhere.image.id, elsewhere.image.reused) == ("copied", built.image.id, False)
    assert Path(elsewhere.image.path).parent == cluster / "head" / "cache" / "images"
    assert runner_of(elsewhere) == str(Path(elsewhere.image.path) / "venv" / "bin" / "python")
    assert "copying it from" in Path(elsewhere.log_path).read_text()
    assert again.image is not None
    assert (again.image.source, again.image.reused) == ("cache", True)
    assert builds.read_text().splitlines() == ["build at 0"]  # built once, for both nodes


def test_an_image_built_ahead_on_a_node_draws_its_step_there_and_the_other_node_copies_it(
    cluster, repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(IMAGE_ROOT_ENV, raising=False)
    builds = tmp_path / "builds"
    with RayExecutor(str(repo.path), 2, None, {SLOT: 1}, None) as executor:
        near, far = workers_by_node(executor)
        request = image_request(repo.path, repo.shas[0], tmp_path, 1, BUILD_COUNTER=str(builds))
        ahead = executor.ahead_builder(1)
        ahead.want([replace(request, log_path=str(tmp_path / "ahead.log"))], lambda sha: True)
        (builder,) = [running.worker for running in ahead.running.values()]
        other = far if builder == near else near
        wait_for(lambda: bool(ahead.reap()), what="the build ahead")
        assert [o.status for o in ahead.outcomes.values()] == [AheadStatus.READY]
        assert executor.prefer_workers(request, [other, builder]) == [builder, other]
        placed = run(executor, request)  # unpinned, both workers free
        assert (placed.worker, placed.image is not None and placed.image.source) == (builder, "cache")
        copied = run(executor, replace(request, step_id=2, log_path=str(tmp_path / "2.log"), pin_worker=other))
    assert copied.image is not None
    assert copied.image.source == "copied"  # from the node that built it ahead, not built again
    assert builds.read_text().splitlines() == ["build at 0"]


def test_a_copy_from_a_node_whose_actor_is_gone_falls_back_to_a_build(cluster, repo, tmp_path: Path, monkeypatch):
    monkeypatch.delenv(IMAGE_ROOT_ENV, raising=False)
    builds = tmp_path / "builds"
    with RayExecutor(str(repo.path), 2, None, {SLOT: 1}, None, max_restarts=0) as executor:
        near, far = workers_by_node(executor)
        first = image_request(repo.path, repo.shas[0], tmp_path, 1, BUILD_COUNTER=str(builds))
        assert run(executor, replace(first, pin_worker=far)).image is not None
        far_actor = executor.actor_handles()[far]
        ray.kill(far_actor, no_restart=True)
        result = run(executor, replace(first, step_id=2, log_path=str(tmp_path / "2.log"), pin_worker=near))
    assert result.image is not None
    assert result.image.source == "built"
    assert "building it here" in Path(result.log_path).read_text()
    assert builds.read_text().splitlines() == ["build at 0", "build at 0"]


def test_a_holder_sends_its_image_while_its_own_step_runs_and_that_step_still_cancels(
    cluster, repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The "images" group answers beside the holder's running step, and the "control" group's cancel reaches it."""
    monkeypatch.delenv(IMAGE_ROOT_ENV, raising=False)
    pid_file = tmp_path / "busy.pid"
    with RayExecutor(str(repo.path), 2, None, {SLOT: 1}, None) as executor:
        near, far = workers_by_node(executor)
        first = image_request(repo.path, repo.shas[0], tmp_path, 1)
        assert run(executor, replace(first, pin_worker=far)).image is not None
        busy = replace(first, step_id=2, log_path=str(tmp_path / "2.log"), pin_worker=far)
        executor.submit(replace(busy, run_cmd=f"echo $$ > {pid_file}; sleep 600"))
        wait_for(pid_file.exists, SAFETY_S, "the holder's own step to run")
        copied = run(executor, replace(first, step_id=3, log_path=str(tmp_path / "3.log"), pin_worker=near))
        executor.cancel(busy.step_id)
        cancelled = wait_result(executor, busy.step_id)
    assert copied.image is not None
    assert (copied.image.source, copied.worker) == ("copied", near)
    assert cancelled.verdict is Verdict.CANCELLED, cancelled.detail
    assert gone(int(pid_file.read_text()))


def test_an_image_whose_python_lacks_the_base_packages_runs_its_test_from_the_slot(cluster, repo, tmp_path: Path):
    """Its build removes the venv's link to the base environment: no ray there, so no Ray worker can start in it."""
    build = f'bash build.sh && rm "$VIRTUAL_ENV"/lib/python*/site-packages/{SEED_PTH}'
    test = (
        '! python -c "import ray" 2>/dev/null && python -c "import ctypes, tinypkg; '
        "print('metric:', ctypes.CDLL('./libvalue.so').value())\""
    )
    request = image_request(repo.path, repo.shas[0], tmp_path, 1)
    request = replace(request, build_cmd=build, run_cmd=f"{RUNNER}; {test}")
    with RayExecutor(str(repo.path), 1, None, {SLOT: 1}, None, image_root=str(tmp_path / "images")) as executor:
        result = run(executor, request)
        (slot,) = executor.worker_info().values()
    assert result.image is not None
    assert result.image.source == "built"
    note = "the image's python cannot host the step's runner under Ray (ModuleNotFoundError"
    assert note in Path(result.log_path).read_text()
    assert runner_of(result) == ""
    assert f"runner pid={slot.pid} " in Path(result.log_path).read_text()  # the slot's actor ran the test


def test_a_cancel_reaches_a_test_running_in_its_image_and_stops_it(cluster, repo, tmp_path: Path):
    pid_file = tmp_path / "test.pid"
    request = image_request(repo.path, repo.shas[0], tmp_path, 1)
    request = replace(request, run_cmd=f"{RUNNER}; echo $$ > {pid_file}; sleep 600")
    with RayExecutor(str(repo.path), 1, None, {SLOT: 1}, None, image_root=str(tmp_path / "images")) as executor:
        executor.submit(request)
        wait_for(pid_file.exists, SAFETY_S, "the test to start")
        executor.cancel(request.step_id)
        cancelled = wait_result(executor, request.step_id)
        again = run(executor, replace(request, step_id=2, run_cmd=RUN_CMD, log_path=str(tmp_path / "2.log")))
    assert cancelled.verdict is Verdict.CANCELLED, cancelled.detail
    assert gone(int(pid_file.read_text()))
    assert again.image is not None
    assert again.image.reused


def test_a_lost_image_runner_makes_the_step_lost_its_test_dies_and_the_slot_serves_on(cluster, repo, tmp_path: Path):
    pids = tmp_path / "pids"
    request = image_request(repo.path, repo.shas[0], tmp_path, 1)
    request = replace(request, run_cmd=f"{RUNNER}; echo $PPID $$ > {pids}.new; mv {pids}.new {pids}; sleep 600")
    with RayExecutor(str(repo.path), 1, None, {SLOT: 1}, None, image_root=str(tmp_path / "images")) as executor:
        executor.submit(request)
        wait_for(pids.exists, SAFETY_S, "the test to start")
        runner, test = map(int, pids.read_text().split())
        assert runner not in executor.worker_pids().values()  # the image's runner, not the slot's actor
        os.kill(runner, signal.SIGKILL)
        lost = wait_result(executor, request.step_id)
        wait_for(lambda: gone(test), SAFETY_S, "the reaper to kill the test")
        again = run(executor, replace(request, step_id=2, run_cmd=RUN_CMD, log_path=str(tmp_path / "2.log")))
    assert (lost.verdict, lost.error_kind) == (Verdict.ERROR, ErrorKind.WORKER_LOST), lost.detail
    assert "the image's runner" in lost.detail
    assert again.worker == lost.worker


def recording_holder(root: Path, record: Path) -> object:
    """A slot actor's holder methods (ImageHolder, as StepActor has them) in the same concurrency groups, writing to
    record whether its stream ran out, was stopped mid-stream, or gave up waiting for its image's lock, and to
    record.started when its stream starts (defined here, so that Ray ships the class by value)."""

    class RecordingHolder(ImageHolder):
        def image_chunks(self, image_id: str, copy_id: str = "") -> Iterator[bytes]:
            record.with_suffix(".started").touch()
            sent = 0
            with closing(super().image_chunks(image_id, copy_id)) as chunks:
                try:
                    for chunk in chunks:
                        sent += 1
                        yield chunk
                except GeneratorExit:
                    record.write_text(f"stopped after {sent}")
                    raise
                except CopyStoppedError:
                    record.write_text(f"gave up waiting after {sent}")
                    raise
            record.write_text(f"sent all {sent}")

    groups = {IMAGES_GROUP: 1, CONTROL_GROUP: 1}
    return ray.remote(concurrency_groups=groups)(RecordingHolder).remote(root)  # type: ignore[call-overload]


def test_a_receiver_that_stops_early_stops_the_holders_stream_and_frees_its_image(cluster, tmp_path: Path):
    root, record, image_id = tmp_path / "far-images", tmp_path / "record", "0123456789abcdef"
    cache = ImageCache(root)
    made = now_iso()
    cache.write_manifest(
        ImageManifest(image_id, {}, "repo", "0" * 40, cache.node, ImageStatus.READY, made, made, source="built")
    )
    with (cache.image_dir(image_id) / "big.bin").open("wb") as big:
        for _ in range(16):  # many chunks more than the holder may send ahead (data: tar sends a hole as nothing)
            big.write(b"x" * CHUNK_BYTES)
    chunks = RayImagePeer(recording_holder(root, record)).chunks(image_id, lambda: False)

    assert next(chunks)
    chunks.close()  # as receive() does when the step is cancelled mid-copy

    wait_for(record.exists, SAFETY_S, "the holder's stream to end")
    assert record.read_text().startswith("stopped after"), record.read_text()
    # the holder lets go of its shared lock as its stream closes, just after it writes the record
    wait_for(lambda: cache.remove(image_id), SAFETY_S, "the holder's lock to be freed and the image removed")


def test_a_stop_ends_the_wait_for_a_holder_that_waits_for_its_image(cluster, tmp_path: Path):
    """The holder's image is locked there (being removed or rebuilt): the holder waits for its shared lock, for up to
    HOLD_TIMEOUT_S, and sends nothing meanwhile. A receiver told to stop (its step was cancelled) stops waiting at
    once, and so does the holder, the lock still held, rather than after HOLD_TIMEOUT_S: no chunk has been yielded
    for Ray's cancel to land on, the receiver's stop_copy reaches it. Its image is then free."""
    root, image_id, record = tmp_path / "far-images", "0123456789abcdef", tmp_path / "record"
    cache = ImageCache(root)
    made = now_iso()
    cache.write_manifest(ImageManifest(image_id, {}, "repo", "0" * 40, cache.node, ImageStatus.READY, made, made))
    (cache.image_dir(image_id) / "small.bin").write_bytes(b"x" * 100)
    stop = threading.Event()
    chunks = RayImagePeer(recording_holder(root, record)).chunks(image_id, stop.is_set)
    stopped: list[BaseException] = []

    def receive() -> None:
        try:
            next(chunks)
        except CopyStoppedError as exc:
            stopped.append(exc)

    with cache.lock(image_id):  # held by this process: the holder's actor waits for it
        receiver = threading.Thread(target=receive)
        receiver.start()
        wait_for(record.with_suffix(".started").exists, SAFETY_S, "the holder to start its stream")
        stop.set()
        receiver.join(SAFETY_S)
        assert len(stopped) == 1, "the receiver did not stop"
        wait_for(record.exists, SAFETY_S, "the holder to give up its wait")
        assert record.read_text() == "gave up waiting after 0"

    wait_for(lambda: cache.remove(image_id), SAFETY_S, "the holder to free its image")
