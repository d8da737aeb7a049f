"""RayImagePeer: another node's slot actor as the holder of an image (workers/images/transfer.py), for a step whose
node lacks the image where the nodes share no cache root. The holder answers from its actor's "images" concurrency
group, so it sends while its own step runs; a holder that is gone or fails makes the copy fail, and the step's
node builds the image itself. A receiver that stops (its step was cancelled or ran out of time) tells the holder
through its "control" group too: a holder still waiting for its image's lock, where no chunk has been yielded for
Ray's cancel to land on, gives up at once rather than after HOLD_TIMEOUT_S."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ray
from ray import exceptions as ray_errors

from bisector.workers.images.cache import ImageCache
from bisector.workers.images.transfer import CacheHolder, CopyStoppedError, ImageCopyError, ImageOffer
from bisector.workers.ray_cluster import CONTROL_GROUP, one_line

IMAGES_GROUP = "images"
OFFER_TIMEOUT_S = 60.0
AHEAD_CHUNKS = 4  # chunks (transfer.CHUNK_BYTES) the holder sends before the receiver has read them
CHUNK_TIMEOUT_S = 300.0  # one chunk (transfer.CHUNK_BYTES) from a busy node
STOP_POLL_S = 0.2  # how often a wait for the holder looks whether the step was cancelled or ran out of time
EARLY_STOPS_KEPT = 64  # stops that came before their copy started on the holder (its call was still queued)


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
        copy_id = uuid.uuid4().hex
        try:
            stream = call.remote(image_id, copy_id)
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
                with contextlib.suppress(ray_errors.RayError):
                    self._actor.stop_copy.options(concurrency_group=CONTROL_GROUP).remote(copy_id)


class CopyStops:
    """The holder's side: which of the copies it sends their receivers stopped. image_chunks runs in the "images"
    group and watches its copy; stop_copy comes in the "control" group while it waits or sends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, threading.Event] = {}
        self._early: deque[str] = deque(maxlen=EARLY_STOPS_KEPT)

    @contextlib.contextmanager
    def watching(self, copy_id: str) -> Iterator[Callable[[], bool]]:
        """should_stop for the copy copy_id while it runs here."""
        stopped = threading.Event()
        with self._lock:
            if copy_id in self._early:
                stopped.set()
            self._running[copy_id] = stopped
        try:
            yield stopped.is_set
        finally:
            with self._lock:
                self._running.pop(copy_id, None)

    def stop(self, copy_id: str) -> None:
        with self._lock:
            running = self._running.get(copy_id)
            if running is None:
                self._early.append(copy_id)
            else:
                running.set()


class ImageHolder:
    """The holder's methods of a slot actor (StepActor): its node's ready images, offered and sent to another node's
    step from the "images" group; stop_copy comes from the "control" group."""

    def __init__(self, image_root: Path | None) -> None:
        self._image_root = image_root  # None: this node's own cache root
        self._copy_stops = CopyStops()

    def image_offer(self, image_id: str) -> ImageOffer | None:
        """The image, where this node holds it ready."""
        return CacheHolder(ImageCache(self._image_root)).offer(image_id)

    def image_chunks(self, image_id: str, copy_id: str = "") -> Iterator[bytes]:
        """The image as a tar stream (a streaming call); its receiver may stop it with stop_copy(copy_id)."""
        with self._copy_stops.watching(copy_id) as stopped:
            yield from CacheHolder(ImageCache(self._image_root)).chunks(image_id, stopped)

    def stop_copy(self, copy_id: str) -> None:
        """The receiver of image_chunks(..., copy_id) stopped reading."""
        self._copy_stops.stop(copy_id)


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
