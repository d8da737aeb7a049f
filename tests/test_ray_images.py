"""Worker images on a real two-node local Ray cluster: a step runs inside its image's venv on either node, an image
built on one node serves the other through a cache root both mount ($BISECT_IMAGE_ROOT), and without one, steps
prefer the node that holds their image.

Each node has a cache dir of its own (as separate machines would), so without a shared root nothing is shared.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from images.image_repo import ImageRepo, image_request, make_image_repo

from vocab.domain import StepResult, Verdict
from workers.executor import StepRequest
from workers.images.cache import IMAGE_ROOT_ENV

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from workers.ray_executor import RayExecutor  # noqa: E402  (needs Ray)

pytestmark = [
    pytest.mark.ray,
    pytest.mark.xdist_group("ray"),  # one local Ray cluster at a time
    pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)"),
]
ROOT = Path(__file__).resolve().parents[1]
SLOT = "image_slot"  # each node offers one: a two-slot executor has one worker per node
SAFETY_S = 300.0  # only against a hang


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
            head_node_args={"num_cpus": 2, "num_gpus": 0, "resources": {SLOT: 1}, "include_dashboard": False},
        )
        env.setenv("BISECT_CACHE_DIR", str(homes / "far" / "cache"))
        env.setenv("BISECT_DATA_DIR", str(homes / "far" / "data"))
        local.add_node(num_cpus=2, num_gpus=0, resources={SLOT: 1})
    ray.init(address=local.address, log_to_driver=False, logging_level=logging.ERROR)
    yield homes
    ray.shutdown()
    local.shutdown()


@pytest.fixture
def repo(tmp_path: Path) -> ImageRepo:
    return make_image_repo(tmp_path / "repo")


def run(executor: RayExecutor, request: StepRequest) -> StepResult:
    executor.submit(request)
    deadline = time.monotonic() + SAFETY_S
    results: list[StepResult] = []
    while not results:
        assert time.monotonic() < deadline, f"step {request.step_id} never came back"
        results = executor.poll(0.2)
    (result,) = results
    assert result.verdict is Verdict.GOOD, result.detail  # test.sh asserts it runs on the image's venv python
    return result


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
    with RayExecutor(str(repo.path), 2, 0, {SLOT: 1}, None, image_root=str(shared)) as executor:
        near, far = workers_by_node(executor)
        request = image_request(repo.path, repo.shas[0], tmp_path, 1, BUILD_COUNTER=str(builds))
        built = run(executor, replace(request, pin_worker=far))
        reused = run(executor, replace(request, step_id=2, log_path=str(tmp_path / "2.log"), pin_worker=near))
    assert built.image is not None
    assert reused.image is not None
    assert (built.image.source, reused.image.source, reused.image.reused) == ("built", "cache", True)
    assert reused.image.id == built.image.id
    assert Path(reused.image.path).parent == shared
    assert builds.read_text().splitlines() == ["build at 0"]
    assert not (cluster / "far" / "cache" / "images" / built.image.id).exists()


def test_without_a_shared_root_each_node_builds_and_steps_prefer_the_node_with_the_image(
    cluster, repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(IMAGE_ROOT_ENV, raising=False)
    builds = tmp_path / "builds"
    with RayExecutor(str(repo.path), 2, 0, {SLOT: 1}, None) as executor:
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
        elsewhere = run(executor, replace(second, step_id=3, log_path=str(tmp_path / "3.log"), pin_worker=near))
    assert elsewhere.image is not None
    assert (elsewhere.image.source, elsewhere.image.id) == ("built", built.image.id)  # built again on this node
    assert builds.read_text().splitlines() == ["build at 0", "build at 1"]
