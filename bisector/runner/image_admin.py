"""`bisect images`: list, remove and prune this node's worker images, keeping the store's rows in step."""

from __future__ import annotations

import re
from dataclasses import replace

from bisector.db.store import Store
from bisector.vocab.domain import ImageInfo
from bisector.vocab.errors import InputError
from bisector.vocab.images import parse_size
from bisector.workers.images.cache import ImageCache

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class ImageInUseError(InputError):
    """The image is being built or a step runs on it now."""


def parse_duration(text: str) -> float:
    """'7d', '12h', '30m', '45s' or '2w'. A bare number is refused: `--older-than 30` meant as days would remove
    everything older than 30 seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise InputError(f"{text!r} is not a duration: write one with its unit, like 7d, 12h, 30m or 45s")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def prune_limits(max_size: str | None, older_than: str | None) -> tuple[int | None, float | None]:
    """A prune command's --max-size in bytes and --older-than in seconds (None where not given)."""
    max_bytes = parse_size(max_size) if max_size is not None else None
    return max_bytes, parse_duration(older_than) if older_than is not None else None


def list_images(store: Store, cache: ImageCache) -> list[ImageInfo]:
    """The images the store knows of on every node; this node's rows whose folder is gone are dropped first, and the
    others show their folder under the cache root as it is now (a step reported where it was then)."""
    forget_missing(store, cache)
    return [
        replace(i, path=str(cache.image_dir(i.id))) if i.node == cache.node and not is_container(i) else i
        for i in store.images()
    ]


def is_container(info: ImageInfo) -> bool:
    """A container image (--image-template): the engine holds it, not the cache root; its path is its reference."""
    return "reference" in info.key


def is_engines(info: ImageInfo) -> bool:
    """A container image the engine holds (its row stays while the engine has it), not a failed build's record
    (kept in the cache root like a failed venv image: removed by `images rm`, prune and the LRU cap)."""
    return is_container(info) and info.status != "failed"


def remove_images(store: Store, cache: ImageCache, ids: list[str]) -> list[str]:
    """Remove these images of this node (folder and row); all or nothing is checked before any is removed."""
    rows = store.images(cache.node)
    containers = [info for info in rows if info.id in ids and is_engines(info)]
    if containers:
        raise InputError(
            f"{containers[0].id} is a container image: remove it with the engine (e.g. podman rmi {containers[0].path})"
        )
    known = {info.id for info in rows} | {m.id for m in cache.manifests()}
    unknown = [image_id for image_id in ids if image_id not in known]
    if unknown:
        raise InputError(f"no image {', '.join(unknown)} on {cache.node} (see `bisect images ls`)")
    removed = []
    for image_id in ids:
        if not cache.remove(image_id):
            raise ImageInUseError(f"image {image_id} is being built or used by a step now; try again when it ends")
        removed.append(image_id)
        store.forget_images(cache.node, [image_id])
    return removed


def prune_images(store: Store, cache: ImageCache, max_bytes: int | None, older_than_s: float | None) -> list[str]:
    """Remove least recently used images not in use until this node holds at most max_bytes, and those unused
    for longer than older_than_s; the ids removed."""
    if max_bytes is None and older_than_s is None:
        raise InputError("give --max-size SIZE and/or --older-than DURATION")
    removed = cache.evict(max_bytes if max_bytes is not None else 1 << 62, older_than_s=older_than_s)
    store.forget_images(cache.node, removed)
    forget_missing(store, cache)
    return removed


def forget_missing(store: Store, cache: ImageCache) -> None:
    """Drop the rows of this node's images whose folder another process removed (an LRU eviction)."""
    present = {m.id for m in cache.manifests()}
    gone = [info.id for info in store.images(cache.node) if info.id not in present and not is_engines(info)]
    if gone:
        store.forget_images(cache.node, gone)
