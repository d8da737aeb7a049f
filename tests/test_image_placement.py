"""ImagePlacement: the nodes that hold an image, learnt from results, order the workers a step may run on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from images.image_repo import image_request, make_image_repo

from bisector.vocab.domain import ImageInfo, StepResult, Verdict
from bisector.workers.image_placement import ImagePlacement
from bisector.workers.images.key import image_key

NODES = {"w-a": "node-a", "w-b": "node-b", "w-c": "node-c"}


def result_on(image_id: str, status: str) -> StepResult:
    image = ImageInfo(id=image_id, source="built", reused=False, build_s=1.0, status=status)
    return StepResult(step_id=1, sha="0" * 40, verdict=Verdict.GOOD, image=image)


def test_workers_on_nodes_holding_the_image_come_first_and_failed_images_count_for_nothing(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    request = image_request(repo.path, repo.shas[0], tmp_path)
    assert request.image is not None
    image_id = image_key(str(repo.path), repo.shas[0], request.build_cmd, request.image).id
    placement = ImagePlacement()
    assert placement.rank(request, ["w-a", "w-b", "w-c"], NODES.get) == ["w-a", "w-b", "w-c"]

    placement.record(result_on(image_id, "failed"), "node-a")
    placement.record(result_on(image_id, "ready"), "node-c")
    assert placement.rank(request, ["w-a", "w-b", "w-c"], NODES.get) == ["w-c", "w-a", "w-b"]
    # another commit whose recipe inputs are the same: the same image
    same_inputs = replace(request, sha=repo.shas[1])
    assert placement.rank(same_inputs, ["w-b", "w-c"], NODES.get) == ["w-c", "w-b"]
    # a commit that changed them, a step without an image, a key that cannot be read: the order given
    for other in (
        replace(request, sha=repo.shas[2]),
        replace(request, image=None),
        replace(request, repo=str(tmp_path)),
    ):
        assert placement.rank(other, ["w-a", "w-c"], NODES.get) == ["w-a", "w-c"]


def test_a_node_that_holds_the_image_built_for_its_own_gpus_comes_first(tmp_path: Path):
    """A node's image key names its GPUs' architectures, which the coordinator's key of the step cannot."""
    repo = make_image_repo(tmp_path / "repo")
    request = image_request(repo.path, repo.shas[0], tmp_path)
    assert request.image is not None
    on_h100 = image_key(str(repo.path), repo.shas[0], request.build_cmd, request.image, gpu_archs=("9.0",))
    image = ImageInfo(id=on_h100.id, source="built", reused=False, build_s=1.0, key=on_h100.to_json())
    placement = ImagePlacement()
    placement.record(StepResult(step_id=1, sha=repo.shas[0], verdict=Verdict.GOOD, image=image), "node-b")
    assert placement.rank(request, ["w-a", "w-b", "w-c"], NODES.get) == ["w-b", "w-a", "w-c"]
