"""The image cache root of a node (or of every node that mounts one): an image's folder, its manifest, its lock,
and the LRU size cap.

The root is $BISECT_IMAGE_ROOT where every node mounts one root at that path (an image built on one node serves
all; flock must work across them, as on NFSv4 or a cluster filesystem), else the node's own
vocab.paths.cache_dir()/images; resolved (a link to it stands for its target). Layout under it:
`<id>/manifest.json` (the image's record; its node is the builder's), `<id>/contents.json` (what its build
produced, workers/images/contents.py), `<id>/src` (the commit's tree and its build outputs), `<id>/venv`,
`<id>/triton`, `<id>/inductor`, `<id>/runs` (the tests' private copies);
`locks/<id>.lock` (flock: exclusive while the image is built or removed, shared while a step uses it; removed with
the image, and by the LRU pass where the image has no folder, while held: file_lock re-locks the file at its path);
`ccache/` (the compiler cache every image shares); `.venvs/<name>` (a template: the venv uv made for an interpreter
and uv, which each image's venv is copied from: workers/images/builder.py), `.venvs/.<name>-*` (a template being
written, renamed to `<name>` when whole) and `.venvs/<name>.lock` (flock: shared while a process makes a venv from
the template or writes it, exclusive while the LRU pass removes it); `.incoming-<id>` (a copy from another node being
unpacked, under the image's exclusive lock; one whose lock is free was left by a killed copy, and the LRU pass
removes it). The LRU pass also removes, where their lock is free, the templates no venv was made from for
TEMPLATE_UNUSED_S (another interpreter's or uv's) and the templates' drafts (their writer was killed).

The manifest is written atomically (a temporary file of the writing thread's own renamed over it); an image is
usable only when its manifest says ready. A lock dies with its holder, so a builder killed mid-build leaves a
"building" manifest whose lock is free, and a copy killed after its rename into place a folder without a
manifest: the next one to want the image makes it again, and the LRU pass removes such folders meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from bisector.vocab.paths import cache_dir, remove_tree, tree_size

LOCK_POLL_S = 0.05
IMAGE_ID = re.compile(r"[0-9a-f]{16}")  # an image's folder's name (workers/images/key.py's ImageKey.id)
RUNS = "runs"  # `<id>/runs/`: the tests' private copies of the image (workers/images/run_copy.py)
FILLED_BY_TESTS = ("triton", "inductor")  # `<id>/triton`, `<id>/inductor`: the caches tests write into the image
INCOMING_PREFIX = ".incoming-"  # `.incoming-<id>`: a copy of the image being unpacked (workers/images/transfer.py)
VENV_TEMPLATES = ".venvs"  # the venv uv made for each interpreter and uv, copied into each image
TEMPLATE_UNUSED_S = 24 * 3600  # a template no venv was made from for this long is removed (remade when wanted)
TEMPLATE_NAME = re.compile(r"[0-9a-f]{16}")  # a template's name (workers/images/builder.py's _template_name)


class ImageStatus(StrEnum):
    BUILDING = "building"  # a builder holds its lock (or died: the lock is free then, and it is rebuilt)
    READY = "ready"  # built: steps run on it (each after a check of its contents against their record)
    DAMAGED = "damaged"  # its contents differ from their record: never used; the next step that wants it rebuilds it
    FAILED = "failed"  # its build command failed: steps at this commit skip until `bisect images rm`


@dataclass(frozen=True)
class ImageManifest:
    id: str
    key: dict[str, object]
    repo: str
    sha: str  # the commit it was built at (other commits with the same key reuse it)
    node: str
    status: ImageStatus
    created: str  # ISO 8601, UTC
    last_used: str
    build_s: float = 0.0
    size_bytes: int = 0
    source: str = "built"  # built | artifact | copied (from another node, workers/images/transfer.py)
    log_tail: str = ""
    contents: str = ""  # a ready image's record of what its build produced, by digest (workers/images/contents.py)
    damage: str = ""  # a damaged image's: how its contents differ from their record
    replaced: str = ""  # the damage of the image this one was made in place of ("" when none)

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ImageManifest:
        """The manifest of data; ManifestFormatError where data is not one of this version (another version of the
        tool wrote it, with fields this one lacks or does not know)."""
        try:
            values = dict(data)
            values["status"] = ImageStatus(str(values["status"]))
            return cls(**values)  # type: ignore[arg-type]
        except (TypeError, ValueError, KeyError) as exc:
            raise ManifestFormatError(" ".join(str(exc).split())[:200]) from None


class ManifestFormatError(ValueError):
    """A manifest of another format than this version of the tool writes."""


IMAGE_ROOT_ENV = "BISECT_IMAGE_ROOT"  # a cache root every node mounts at this path: images built on one serve all


def images_root() -> Path:
    """$BISECT_IMAGE_ROOT, else the node's own <cache dir>/images."""
    shared = os.environ.get(IMAGE_ROOT_ENV)
    return Path(shared) if shared else cache_dir() / "images"


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


class LockTimeoutError(Exception):
    """The image's lock was not free before the deadline (or the step was cancelled)."""


class ImageCache:
    def __init__(self, root: Path | None = None) -> None:
        # Resolved: tools that write paths into a venv (uv's editable installs) write the target of a link
        self.root = (root if root is not None else images_root()).resolve()
        self.node = socket.gethostname()

    def image_dir(self, image_id: str) -> Path:
        return self.root / image_id

    @property
    def ccache_dir(self) -> Path:
        return self.root / "ccache"

    def manifest(self, image_id: str) -> ImageManifest | None:
        try:
            data = json.loads((self.image_dir(image_id) / "manifest.json").read_text())
            return ImageManifest.from_json(data)
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def write_manifest(self, manifest: ImageManifest) -> None:
        folder = self.image_dir(manifest.id)
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".manifest.{os.getpid()}.{threading.get_ident()}.tmp"
        temporary.write_text(json.dumps(manifest.to_json(), indent=1))
        temporary.replace(folder / "manifest.json")

    def touch(self, manifest: ImageManifest) -> ImageManifest:
        used = replace(manifest, last_used=now_iso())
        with contextlib.suppress(OSError):
            self.write_manifest(used)
        return used

    def manifests(self) -> list[ImageManifest]:
        if not self.root.is_dir():
            return []
        found = (self.manifest(entry.name) for entry in self.root.iterdir() if entry.is_dir())
        return [m for m in found if m is not None]

    @property
    def templates_dir(self) -> Path:
        return self.root / VENV_TEMPLATES

    @contextlib.contextmanager
    def lock(
        self, image_id: str, *, shared: bool = False, timeout_s: float = float("inf"),
        should_cancel: Callable[[], bool] = lambda: False, on_wait: Callable[[], None] = lambda: None,
    ) -> Iterator[int]:  # fmt: skip
        """Hold the image's lock (exclusive to build or remove it, shared to use it); yields the descriptor, so
        a builder can turn its exclusive lock into a shared one (lock_shared) once the image is ready. on_wait is
        called once if the lock is not free at first."""
        with file_lock(self._lock_path(image_id), shared, timeout_s, should_cancel, on_wait) as fd:
            yield fd

    def _lock_path(self, image_id: str) -> Path:
        return self.root / "locks" / f"{image_id}.lock"

    def remove(self, image_id: str) -> bool:
        """Delete an image that no one builds or uses now; False when its lock is held."""
        try:
            with self.lock(image_id, timeout_s=0):
                folder = self.image_dir(image_id)
                with contextlib.suppress(FileNotFoundError):
                    (folder / "manifest.json").unlink()  # first: nobody takes a half-deleted image for ready
                remove_tree(folder)
                self._lock_path(image_id).unlink(missing_ok=True)
                return True
        except LockTimeoutError:
            return False

    def evict(self, max_bytes: int, keep: frozenset[str] = frozenset(), older_than_s: float | None = None) -> list[str]:
        """Remove least recently used images not in use until the root holds at most max_bytes (and, with
        older_than_s, every image unused for longer); images in keep stay. The ids removed."""
        self._remove_leftovers()
        manifests = sorted(self.manifests(), key=lambda m: m.last_used)
        sizes = {m.id: self._size(m) for m in manifests}
        total = sum(sizes.values())
        cutoff = None if older_than_s is None else datetime.now(UTC).timestamp() - older_than_s
        removed: list[str] = []
        for manifest in manifests:
            stale = cutoff is not None and datetime.fromisoformat(manifest.last_used).timestamp() < cutoff
            if manifest.id in keep or manifest.status is ImageStatus.BUILDING or not (total > max_bytes or stale):
                continue
            if self.remove(manifest.id):
                total -= sizes[manifest.id]
                removed.append(manifest.id)
        return removed

    def _size(self, manifest: ImageManifest) -> int:
        """The bytes the image holds now, without walking its tree and venv: its size as made (its record keeps them
        as they were), what its tests wrote since into Triton's and Inductor's caches, and the image's size again for
        each private copy of it (a test runs in each). An image without a recorded size is measured whole."""
        folder = self.image_dir(manifest.id)
        if not manifest.size_bytes:  # none recorded: being built, or failed
            return tree_size(folder)
        try:
            copies = len(os.listdir(folder / RUNS))
        except OSError:
            copies = 0
        return manifest.size_bytes * (1 + copies) + sum(tree_size(folder / cache) for cache in FILLED_BY_TESTS)

    def _remove_leftovers(self) -> None:
        """Remove what killed copies and builds left, where the image's lock is free (a copy or a build holds the
        image's exclusive lock until its manifest says ready or failed): `.incoming-<id>` folders (a copy killed
        while it unpacked), image folders without a manifest (a copy killed between its rename into place and its
        manifest's write) and those whose manifest says building (a killed build); the lock files of images that
        have no folder (removed, or whose build was cancelled or failed); and the unused venv templates."""
        if not self.root.is_dir():
            return
        remove_unused_templates(self.templates_dir)
        for entry in self.root.iterdir():
            image_id = entry.name.removeprefix(INCOMING_PREFIX)
            if entry.name == image_id and not (IMAGE_ID.fullmatch(image_id) and self._unfinished(image_id)):
                continue
            with contextlib.suppress(LockTimeoutError), self.lock(image_id, timeout_s=0):
                if entry.name == image_id and not self._unfinished(image_id):  # made meanwhile
                    continue
                remove_tree(entry)
        with contextlib.suppress(OSError):
            for lock in (self.root / "locks").iterdir():
                image_id = lock.name.removesuffix(".lock")
                if not (lock.name.endswith(".lock") and IMAGE_ID.fullmatch(image_id)) or self._has_folder(image_id):
                    continue
                with contextlib.suppress(LockTimeoutError), self.lock(image_id, timeout_s=0):
                    if not self._has_folder(image_id):  # nobody made one meanwhile
                        lock.unlink(missing_ok=True)

    def _has_folder(self, image_id: str) -> bool:
        """Whether the image has a folder, or a copy of one being unpacked."""
        return self.image_dir(image_id).exists() or (self.root / f"{INCOMING_PREFIX}{image_id}").exists()

    def _unfinished(self, image_id: str) -> bool:
        """Whether the image's folder has no manifest, or one that says building (a manifest of another format
        is another version's image: it stays)."""
        folder = self.image_dir(image_id)
        if not folder.is_dir():
            return False
        if not (folder / "manifest.json").exists():
            return True
        manifest = self.manifest(image_id)
        return manifest is not None and manifest.status is ImageStatus.BUILDING


def template_lock(
    templates: Path, name: str, *, shared: bool, timeout_s: float = float("inf")
) -> contextlib.AbstractContextManager[int]:
    """Hold the lock of the template `name` in templates: shared while a venv is made from it or it is written,
    exclusive to remove it and its drafts (which may remove the lock's file too)."""
    return file_lock(templates / f"{name}.lock", shared, timeout_s)


def remove_unused_templates(templates: Path, unused_s: float = TEMPLATE_UNUSED_S) -> None:
    """Remove the templates in templates no venv was made from for unused_s (a template's mtime is its last use),
    with their lock's file, and every template's drafts, where no process holds the template's lock: a template in
    use and a draft being written stay."""
    try:
        entries = [entry.name for entry in templates.iterdir()]
    except OSError:
        return
    cutoff = time.time() - unused_s
    drafts: dict[str, list[str]] = {}
    for entry in entries:
        name = entry.removeprefix(".").partition("-")[0].removesuffix(".lock")
        if TEMPLATE_NAME.fullmatch(name):
            own_drafts = drafts.setdefault(name, [])
            if entry.startswith(f".{name}-"):
                own_drafts.append(entry)
    for name, own_drafts in drafts.items():
        if not own_drafts and not _unused(templates / name, cutoff):
            continue
        with contextlib.suppress(LockTimeoutError, OSError), template_lock(templates, name, shared=False, timeout_s=0):
            for draft in own_drafts:
                remove_tree(templates / draft)
            if _unused(templates / name, cutoff):
                remove_tree(templates / name)
                (templates / f"{name}.lock").unlink()  # while held: a process waiting for it opens the file anew


def _unused(template: Path, cutoff: float) -> bool:
    """Whether no venv was made from template since cutoff (true where there is none)."""
    try:
        return template.stat().st_mtime < cutoff
    except FileNotFoundError:
        return True


@contextlib.contextmanager
def file_lock(
    path: Path, shared: bool = False, timeout_s: float = float("inf"),
    should_cancel: Callable[[], bool] = lambda: False, on_wait: Callable[[], None] = lambda: None,
) -> Iterator[int]:  # fmt: skip
    """Hold an flock on the file at path (made where missing; exclusive, or shared), waiting until timeout_s or
    should_cancel() (LockTimeoutError); on_wait is called once if it is not free at first. Yields the descriptor.
    Its holder may remove the file: a lock taken on a file no longer at path is let go and taken on path's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    deadline = time.monotonic() + timeout_s
    waited = False
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline or should_cancel():
                    raise LockTimeoutError(path.stem) from None
                if not waited:
                    on_wait()
                    waited = True
                time.sleep(LOCK_POLL_S)
                continue
            if _names(path, fd):
                break
            reopened = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # its holder removed the file it had opened
            os.close(fd)
            fd = reopened
        yield fd
    finally:
        os.close(fd)


def _names(path: Path, fd: int) -> bool:
    """Whether the file open at fd is the one at path."""
    try:
        at_path = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (at_path.st_dev, at_path.st_ino) == (held.st_dev, held.st_ino)


def lock_shared(fd: int) -> None:
    """Turn a held exclusive image lock into a shared one (a built image about to be used)."""
    fcntl.flock(fd, fcntl.LOCK_SH)
