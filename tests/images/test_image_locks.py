"""The image cache's lock files (workers/images/cache.py's `locks/<id>.lock`): one per image while it is there, none
for the images removed or evicted, and a lock waited for across a removal still keeps the next holder out."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from bisect_helpers import wait_for

from bisector.workers.images.cache import ImageCache, ImageManifest, ImageStatus, LockTimeoutError


def _record(cache: ImageCache, image_id: str, status: ImageStatus = ImageStatus.READY, used: str = "1") -> str:
    """An image recorded as its builder records it: folder and manifest written under its exclusive lock."""
    with cache.lock(image_id):
        (cache.image_dir(image_id) / "src").mkdir(parents=True)
        when = f"2026-12-0{used}T00:00:00+00:00"
        cache.write_manifest(ImageManifest(image_id, {}, "repo", "a" * 40, cache.node, status, when, when))
    return image_id


def _locked_ids(cache: ImageCache) -> set[str]:
    return {lock.name.removesuffix(".lock") for lock in (cache.root / "locks").iterdir()}


def test_images_removed_or_evicted_leave_no_lock_files(tmp_path: Path):
    cache = ImageCache(tmp_path / "images")
    removed, oldest, older, kept = (_record(cache, c * 16, used=str(i)) for i, c in enumerate("abcd", start=1))
    killed_build = _record(cache, "e" * 16, ImageStatus.BUILDING)  # its lock is free: its builder died
    with cache.lock("f" * 16):
        pass  # a build that was cancelled or failed before it kept anything
    assert _locked_ids(cache) == {removed, oldest, older, kept, killed_build, "f" * 16}

    assert cache.remove(removed)
    assert _locked_ids(cache) == {oldest, older, kept, killed_build, "f" * 16}
    assert cache.evict(0, keep=frozenset({kept})) == [oldest, older]
    assert _locked_ids(cache) == {kept}
    assert [m.id for m in cache.manifests()] == [kept]


class PausedRemoval(ImageCache):
    """A cache whose remove() of `image_id` waits, holding the image's lock, until `resume` is set."""

    def __init__(self, root: Path, image_id: str) -> None:
        super().__init__(root)
        self.image_id = image_id
        self.holding, self.resume = threading.Event(), threading.Event()
        self.paused = False

    def image_dir(self, image_id: str) -> Path:
        if self.paused and image_id == self.image_id:
            self.holding.set()
            assert self.resume.wait(60)
        return super().image_dir(image_id)


def test_a_lock_waited_for_while_its_image_is_removed_is_held_on_the_file_at_its_path(tmp_path: Path):
    """remove() deletes the lock's file while it holds it: a builder that waited meanwhile must hold the lock that
    keeps the next one out, not the lock of a file no longer there."""
    cache = PausedRemoval(tmp_path / "images", "a" * 16)
    image_id = _record(cache, cache.image_id)
    cache.paused = True
    removing = threading.Thread(target=cache.remove, args=(image_id,))
    removing.start()
    assert cache.holding.wait(60)
    cache.paused = False
    waiting, release = threading.Event(), threading.Event()
    held: list[bool] = []

    def build() -> None:
        with cache.lock(image_id, on_wait=waiting.set) as fd:
            lock = cache.root / "locks" / f"{image_id}.lock"
            held.append(lock.exists() and os.fstat(fd).st_ino == lock.stat().st_ino)
            release.wait()

    builder = threading.Thread(target=build)
    builder.start()
    try:
        assert waiting.wait(60)
        cache.resume.set()
        removing.join()
        wait_for(lambda: bool(held), what="the waiting builder to take the lock")
        assert held == [True]
        assert cache.manifest(image_id) is None  # removed: the builder builds it anew
        with pytest.raises(LockTimeoutError), cache.lock(image_id, timeout_s=0):
            pass
    finally:
        cache.resume.set()
        release.set()
        builder.join()
