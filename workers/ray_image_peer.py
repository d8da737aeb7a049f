"""RayImagePeer: another node's slot actor as the holder of an image (workers/images/transfer.py), for a step whose
node lacks the image where the nodes share no cache root. The holder answers from its actor's "images" concurrency
group, so it sends while its own step runs; a holder that is gone or fails makes the copy fail, and the step's
node builds the image itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ray
from ray import exceptions as ray_errors

from workers.images.transfer import ImageCopyError, ImageOffer
from workers.ray_cluster import one_line

IMAGES_GROUP = "images"
OFFER_TIMEOUT_S = 60.0
CHUNK_TIMEOUT_S = 300.0  # one chunk (transfer.CHUNK_BYTES) from a busy node


class RayImagePeer:
    def __init__(self, actor: Any) -> None:
        self._actor = actor  # ActorHandle of a StepActor on a node that held the image when the step was placed

    def offer(self, image_id: str) -> ImageOffer | None:
        try:
            call = self._actor.image_offer.options(concurrency_group=IMAGES_GROUP)
            offer: ImageOffer | None = ray.get(call.remote(image_id), timeout=OFFER_TIMEOUT_S)
        except (ray_errors.RayError, TimeoutError) as exc:
            raise ImageCopyError(one_line(exc, last=isinstance(exc, ray_errors.RayTaskError))) from None
        return offer

    def chunks(self, image_id: str) -> Iterator[bytes]:
        try:
            call = self._actor.image_chunks.options(concurrency_group=IMAGES_GROUP, num_returns="streaming")
            for ref in call.remote(image_id):
                chunk: bytes = ray.get(ref, timeout=CHUNK_TIMEOUT_S)
                yield chunk
        except (ray_errors.RayError, TimeoutError) as exc:
            raise ImageCopyError(one_line(exc, last=isinstance(exc, ray_errors.RayTaskError))) from None
