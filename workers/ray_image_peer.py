"""RayImagePeer: another node's slot actor as the holder of an image (workers/images/transfer.py), for a step whose
node lacks the image where the nodes share no cache root. The holder answers from its actor's "images" concurrency
group, so it sends while its own step runs; a holder that is gone or fails makes the copy fail, and the step's
node builds the image itself."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray
from ray import exceptions as ray_errors

from workers.images.transfer import CopyStoppedError, ImageCopyError, ImageOffer
from workers.ray_cluster import one_line

IMAGES_GROUP = "images"
OFFER_TIMEOUT_S = 60.0
AHEAD_CHUNKS = 4  # chunks (transfer.CHUNK_BYTES) the holder sends before the receiver has read them
CHUNK_TIMEOUT_S = 300.0  # one chunk (transfer.CHUNK_BYTES) from a busy node
STOP_POLL_S = 0.2  # how often a wait for the holder looks whether the step was cancelled or ran out of time


class RayImagePeer:
    def __init__(self, actor: Any) -> None:
        self._actor = actor  # ActorHandle of a StepActor on a node that held the image when the step was placed

    def offer(self, image_id: str, should_stop: Callable[[], bool]) -> ImageOffer | None:
        try:
            call = self._actor.image_offer.options(concurrency_group=IMAGES_GROUP)
            answer = call.remote(image_id)
            _wait(answer, should_stop, OFFER_TIMEOUT_S)
            offer: ImageOffer | None = ray.get(answer)
        except (ray_errors.RayError, TimeoutError) as exc:
            raise _copy_error(exc) from None
        return offer

    def chunks(self, image_id: str, should_stop: Callable[[], bool]) -> Iterator[bytes]:
        """The holder's stream, at most AHEAD_CHUNKS ahead of what is read (Ray's streaming generator otherwise
        puts the whole image in the object store as fast as tar reads it). Closed before its end (the step was
        cancelled, the unpacking failed), or stopped by should_stop while the next chunk is awaited, the holder's
        generator is cancelled: its tar is killed and its shared lock freed, rather than the rest of the image
        sent for nobody."""
        call = self._actor.image_chunks.options(
            concurrency_group=IMAGES_GROUP, num_returns="streaming", _generator_backpressure_num_objects=AHEAD_CHUNKS
        )
        try:
            stream = call.remote(image_id)
        except ray_errors.RayError as exc:
            raise _copy_error(exc) from None
        ended = False
        try:
            while True:
                _wait(stream, should_stop, CHUNK_TIMEOUT_S)
                ref = next(stream, None)
                if ref is None:
                    break
                chunk: bytes = ray.get(ref)
                yield chunk
            ended = True
        except (ray_errors.RayError, TimeoutError) as exc:
            raise _copy_error(exc) from None
        finally:
            if not ended:
                with contextlib.suppress(ray_errors.RayError):
                    ray.cancel(stream)


def _wait(waitable: Any, should_stop: Callable[[], bool], timeout_s: float) -> None:
    """Wait until waitable (an object, or a stream's next chunk) is ready: CopyStoppedError once should_stop turns
    true meanwhile, TimeoutError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not ray.wait([waitable], timeout=min(STOP_POLL_S, max(deadline - time.monotonic(), 0)))[0]:
        if should_stop():
            raise CopyStoppedError("stopped while the holder was waited for")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the holder answered nothing for {timeout_s:.0f}s")


def _copy_error(exc: Exception) -> ImageCopyError:
    return ImageCopyError(one_line(exc, last=isinstance(exc, ray_errors.RayTaskError)))
