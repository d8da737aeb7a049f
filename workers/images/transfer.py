"""Copying a ready image from a node that holds it to one that does not, where the nodes share no cache root: an
image built once serves every node without being built again.

The holder streams the image's folder as a tar archive (`tar` itself, in chunks, sparse files' holes kept: memory
stays bounded whatever the image's size; on Ray a few chunks ahead of the receiver), under the image's shared lock,
so it is neither removed nor rebuilt meanwhile. The receiver, holding the image's exclusive lock as a builder would,
unpacks it beside its own copy's place (`.incoming-<id>`), rewrites the holder's folder path to its own in the
image's text files and symlinks (venv scripts' shebangs, `activate`, `.pth` files, editable installs' finders; their
times kept), and renames it into place; only then is its manifest written, ready. A binary (compiled Python apart),
or a text file over REWRITE_MAX_BYTES, that names the holder's folder (an RPATH, a path compiled in, debug info)
cannot be moved safely: that copy fails and the image is built here.

An image is copied only between nodes whose base interpreter has the same path: its venv's python links to it and
its seed `.pth` names the base's site-packages. Otherwise, and whenever a copy fails, the receiver builds it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from bisector.workers.images.cache import RUNS, ImageCache, ImageStatus, LockTimeoutError

CHUNK_BYTES = 4 << 20
HOLD_TIMEOUT_S = 120.0  # the holder waits this long for its image's shared lock (it may be being removed)
REWRITE_MAX_BYTES = 16 << 20  # larger files are only searched for the holder's path, in blocks, never rewritten
# tar -c exits 1 when a file changed while it was read (the holder's step runs in the image meanwhile: its tests
# write there); the archive is whole, that file as tar read it.
TAR_WHOLE = (0, 1)
_SNIFF_BYTES = 8192  # a NUL byte in a file's first bytes marks it binary: never rewritten


class ImageCopyError(Exception):
    """The copy could not be made (the holder is gone, its image was removed, the disk is full)."""


class CopyStoppedError(ImageCopyError):
    """The step was cancelled or ran out of time while its image was copied."""


@dataclass(frozen=True)
class ImageOffer:
    """What a holder tells of its ready image before sending it."""

    manifest: dict[str, object]  # its manifest (ImageManifest.to_json())
    folder: str  # the image's folder on the holder: rewritten to the receiver's in the copy
    base_python: str  # the holder's base interpreter (resolved): the venv's python links to it
    node: str  # the holder's host name


class ImagePeer(Protocol):
    """A node that may hold an image (on Ray: a slot actor there). should_stop (the step was cancelled or ran out of
    time) is looked at while the peer is waited for: it raises CopyStoppedError then, however long the holder takes
    to answer (it may wait for its image's lock, or be busy)."""

    def offer(self, image_id: str, should_stop: Callable[[], bool]) -> ImageOffer | None: ...

    def chunks(self, image_id: str, should_stop: Callable[[], bool]) -> Iterable[bytes]: ...


class CacheHolder:
    """The holder's side, over a cache root this process reads: what a Ray slot actor answers for its node."""

    def __init__(self, cache: ImageCache) -> None:
        self.cache = cache

    def offer(self, image_id: str, should_stop: Callable[[], bool] = lambda: False) -> ImageOffer | None:
        return make_offer(self.cache, image_id)

    def chunks(self, image_id: str, should_stop: Callable[[], bool] = lambda: False) -> Iterator[bytes]:
        return archive_chunks(self.cache, image_id, should_stop)


def base_python() -> str:
    return os.path.realpath(sys.executable)


def make_offer(cache: ImageCache, image_id: str) -> ImageOffer | None:
    """The offer of the image when this node holds it ready, else None."""
    manifest = cache.manifest(image_id)
    if manifest is None or manifest.status is not ImageStatus.READY:
        return None
    return ImageOffer(manifest.to_json(), str(cache.image_dir(image_id)), base_python(), cache.node)


def archive_chunks(
    cache: ImageCache, image_id: str, should_stop: Callable[[], bool] = lambda: False
) -> Iterator[bytes]:
    """The image's folder (its manifest and its tests' private copies apart) as a tar stream, read under the image's
    shared lock (waited for until should_stop turns true: CopyStoppedError, or HOLD_TIMEOUT_S pass: ImageCopyError)."""
    with _held(cache, image_id, should_stop):
        current = cache.manifest(image_id)
        if current is None or current.status is not ImageStatus.READY:
            raise ImageCopyError(f"image {image_id} is no longer ready on {cache.node}")
        folder = str(cache.image_dir(image_id))
        command = ["tar", "-C", folder, "--exclude=./manifest.json", f"--exclude=./{RUNS}", "--sparse", "-cf", "-", "."]
        with tempfile.TemporaryFile() as said:  # not a pipe: tar would wait on a full one, and this on tar
            tar = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=said)
            assert tar.stdout is not None
            try:
                while chunk := tar.stdout.read(CHUNK_BYTES):
                    yield chunk
                if tar.wait() not in TAR_WHOLE:
                    raise ImageCopyError(f"tar on {cache.node}: {_tail(said)}")
            finally:
                if tar.poll() is None:  # the receiver stopped reading
                    tar.kill()
                tar.wait()
                tar.stdout.close()


@contextlib.contextmanager
def _held(cache: ImageCache, image_id: str, should_stop: Callable[[], bool]) -> Iterator[None]:
    try:
        with cache.lock(image_id, shared=True, timeout_s=HOLD_TIMEOUT_S, should_cancel=should_stop):
            yield
    except LockTimeoutError:
        if should_stop():
            raise CopyStoppedError("stopped while the holder waited for its image's lock") from None
        raise ImageCopyError(f"image {image_id} was not free on {cache.node} for {HOLD_TIMEOUT_S:.0f}s") from None


def receive(chunks: Iterable[bytes], folder: Path, should_stop: Callable[[], bool]) -> None:
    """Unpack a tar stream into folder (made here; a new, empty place). Raises CopyStoppedError when should_stop turns
    true between two chunks (while one is awaited, the peer's chunks, given should_stop too, raise it), ImageCopyError
    when the stream or the unpacking fails; folder may then be partial."""
    folder.mkdir(parents=True)
    with tempfile.TemporaryFile() as said:
        tar = subprocess.Popen(
            ["tar", "-C", str(folder), "-xf", "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=said
        )
        assert tar.stdin is not None
        stream = iter(chunks)
        try:
            try:
                for chunk in stream:
                    if should_stop():
                        raise CopyStoppedError("stopped between two chunks")
                    tar.stdin.write(chunk)
                tar.stdin.close()
            except BrokenPipeError:
                pass  # tar ended early: its exit status and message say why
            if tar.wait() != 0:
                raise ImageCopyError(f"tar: {_tail(said)}")
        finally:
            if isinstance(stream, Generator):  # stopped early: the holder stops now, not when this is collected
                stream.close()
            if tar.poll() is None:
                tar.kill()
            tar.wait()
            if not tar.stdin.closed:
                with contextlib.suppress(BrokenPipeError):
                    tar.stdin.close()


def relocate(folder: Path, old: str, new: str) -> int:
    """Rewrite old (the holder's image folder) to new in folder's text files and symlink targets; how many
    changed. Where the folders have the same path (the nodes' cache roots do), nothing is read or rewritten.

    A binary (an RPATH, a path compiled in) or a text file too large to rewrite that names old cannot be moved
    safely: the test could fail to load a library on this node and call a good commit bad. Such a copy raises
    ImageCopyError and the image is built here instead. Compiled Python (.pyc) is exempt: its paths only show in
    tracebacks."""
    if old == new:
        return 0
    old_bytes, new_bytes = old.encode(), new.encode()
    changed = 0
    for directory, subdirectories, names in os.walk(folder):
        for name in subdirectories:  # os.walk lists a link to a directory here (and does not follow it)
            changed += _relink(Path(directory, name), old, new)
        for name in names:
            path = Path(directory, name)
            changed += _relink(path, old, new) if path.is_symlink() else _rewrite(path, old_bytes, new_bytes)
    return changed


def relocate_listed(folder: Path, names: Iterable[str], old: str, new: str) -> None:
    """relocate() of only these entries of folder (those its image's record lists as naming the image's folder: text
    files and links, so none is refused)."""
    for name in names:
        path = folder / name
        if path.is_symlink():
            _relink(path, old, new)
        else:
            _rewrite(path, old.encode(), new.encode())


def _relink(path: Path, old: str, new: str) -> bool:
    """Point a symlink into old at the same place under new."""
    if not path.is_symlink():
        return False
    target = os.readlink(path)
    if target != old and not target.startswith(old + os.sep):
        return False
    with _writable(path.parent):
        path.unlink()
        path.symlink_to(new + target[len(old) :])
    return True


def _rewrite(path: Path, old: bytes, new: bytes) -> bool:
    try:
        if not path.is_file():
            return False
        if path.stat().st_size > REWRITE_MAX_BYTES:
            _refuse_if_named(path, old)
            return False
        data = path.read_bytes()
    except OSError:
        return False
    if old not in data:
        return False
    if b"\0" in data[:_SNIFF_BYTES]:
        if path.suffix != ".pyc":
            raise ImageCopyError(f"{path.name} is a binary that names the holder's folder {old.decode()}")
        return False
    held = path.stat()
    temporary = path.with_name(f".{path.name}.relocate")
    with _writable(path.parent):
        temporary.write_bytes(data.replace(old, new))
        os.chmod(temporary, held.st_mode)
        os.utime(temporary, ns=(held.st_atime_ns, held.st_mtime_ns))  # a build's outputs stay up to date
        temporary.replace(path)
    return True


@contextlib.contextmanager
def _writable(folder: Path) -> Iterator[None]:
    """folder writable by its owner for the block, its mode restored after: a package may install its folders
    read-only (0555), and a user other than root could not replace their files."""
    mode = stat.S_IMODE(folder.stat().st_mode)
    if mode & stat.S_IWUSR:
        yield
        return
    folder.chmod(mode | stat.S_IWUSR)
    try:
        yield
    finally:
        folder.chmod(mode)


def _refuse_if_named(path: Path, old: bytes) -> None:
    """Raise ImageCopyError when a file too large to rewrite names old (read in blocks: memory stays bounded)."""
    overlap = len(old) - 1
    with path.open("rb") as data:
        carried = b""
        while block := data.read(CHUNK_BYTES):
            if old in carried + block:
                raise ImageCopyError(
                    f"{path.name} ({path.stat().st_size} bytes) names the holder's folder {old.decode()}"
                )
            carried = block[-overlap:] if overlap else b""


def _tail(said: IO[bytes]) -> str:
    """The end of what tar said (its reason comes after its warnings), on one line."""
    said.seek(max(said.seek(0, os.SEEK_END) - 4096, 0))
    return " ".join(said.read().decode(errors="replace").split())[-300:] or "failed"
