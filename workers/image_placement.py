"""Where images are: which nodes hold each image, learnt from the steps' results, and the workers that run a step
where its image already is.

An executor over several nodes (RayExecutor) records the node of every step that ran on a ready image; a later
step whose image key is the same (the same commit, or another with the same recipe inputs) prefers workers on
those nodes when the choice is otherwise free. With one cache root that every node mounts ($BISECT_IMAGE_ROOT)
an image is everywhere once built, and this only keeps steps where the image's files are warm. Images are told apart
here by their keys without the GPU architectures (ImageKey.on_any_gpu): a node's image is built for the node's GPUs,
which the coordinator does not see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bisector.vocab.domain import ImageInfo, StepResult
from bisector.vocab.errors import InputError, RepoError
from bisector.workers.executor import StepRequest
from bisector.workers.images.cache import ImageStatus
from bisector.workers.images.key import any_gpu_id, image_key


class ImagePlacement:
    def __init__(self) -> None:
        self._nodes: dict[str, set[str]] = {}  # image id on any GPU -> the nodes (executor's node ids) that hold it
        self._ids: dict[tuple[str, str, str | None, object], str | None] = {}  # (repo, sha, build, recipe) -> id

    def image_id(self, request: StepRequest) -> str | None:
        """The id of the image the step runs on, on any GPU (None without one, or when its key cannot be read here)."""
        if request.image is None:
            return None
        wanted = (request.repo, request.sha, request.build_cmd, request.image)
        if wanted not in self._ids:
            try:
                self._ids[wanted] = image_key(request.repo, request.sha, request.build_cmd, request.image).id
            except (RepoError, InputError, OSError):
                self._ids[wanted] = None
        return self._ids[wanted]

    def record(self, result: StepResult, node: str) -> None:
        """A step ran on node: the ready image it used is there now."""
        self.record_image(result.image, node)

    def record_image(self, image: ImageInfo | None, node: str) -> None:
        """A ready image is on node (a step used it, or it was built ahead there)."""
        if image is not None and image.status == ImageStatus.READY.value:
            self._nodes.setdefault(any_gpu_id(image.key, image.id), set()).add(node)

    def nodes_of(self, request: StepRequest) -> frozenset[str]:
        image = self.image_id(request)
        return frozenset(self._nodes.get(image, ())) if image is not None else frozenset()

    def rank(self, request: StepRequest, workers: Sequence[str], node_of: Callable[[str], str | None]) -> list[str]:
        """workers, those on a node that holds the step's image first (otherwise in the order given)."""
        holders = self.nodes_of(request)
        if not holders:
            return list(workers)
        return sorted(workers, key=lambda worker: node_of(worker) not in holders)
