"""An image another node holds is copied rather than built (workers/images/transfer.py): real builds (uv venv,
editable install, a C library with ccache), real tar streams, two cache roots on this host standing for two
nodes' own roots. On Ray the holder is another node's slot actor (tests/test_ray_images.py); here its side of
the copy is called in process."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bisect_helpers import wait_for
from image_repo import image_request, make_image_repo

from bisector.db.store import Store
from bisector.runner.image_admin import prune_images
from bisector.vocab.domain import StepResult, Verdict
from bisector.workers.images.builder import incoming_dir
from bisector.workers.images.cache import ImageCache, ImageManifest, ImageStatus, now_iso
from bisector.workers.images.contents import record_contents
from bisector.workers.images.transfer import (
    CHUNK_BYTES,
    REWRITE_MAX_BYTES,
    CacheHolder,
    CopyStoppedError,
    ImageCopyError,
    ImageOffer,
    archive_chunks,
    receive,
    relocate,
)
from bisector.workers.step import StepRunner, WorkerSlot

ROOT = Path(__file__).resolve().parents[2]
SAFETY_S = 600.0  # only against a hang: a step that waits for an image wrongly waits for as long as this
pytestmark = pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)")


class HolderNode(CacheHolder):
    """The holder's side of a copy (what a slot actor on the node that holds the image answers), counting chunks."""

    def __init__(self, root: Path) -> None:
        super().__init__(ImageCache(root))
        self.sent_chunks = 0

    def chunks(self, image_id: str, should_stop: Callable[[], bool] = lambda: False) -> Iterator[bytes]:
        for chunk in super().chunks(image_id, should_stop):
            self.sent_chunks += 1
            yield chunk


class OtherInterpreterNode(HolderNode):
    """A holder whose base interpreter is another path (its venvs link there)."""

    def offer(self, image_id: str, should_stop: Callable[[], bool] = lambda: False) -> ImageOffer | None:
        offer = super().offer(image_id, should_stop)
        return None if offer is None else replace(offer, base_python="/opt/other/bin/python3.12")


class OtherFormatNode(HolderNode):
    """A holder of another version of the tool, whose manifest has fields this one does not know and lacks one."""

    def offer(self, image_id: str, should_stop: Callable[[], bool] = lambda: False) -> ImageOffer | None:
        offer = super().offer(image_id, should_stop)
        if offer is None:
            return None
        manifest = {name: value for name, value in offer.manifest.items() if name != "key"}
        return replace(offer, manifest={**manifest, "format": 2, "recipe": {"mode": "venv"}})


class BrokenStreamNode(HolderNode):
    """A holder that goes away mid-copy."""

    def chunks(self, image_id: str, should_stop: Callable[[], bool] = lambda: False) -> Iterator[bytes]:
        for chunk in archive_chunks(self.cache, image_id, should_stop):
            yield chunk[: len(chunk) // 2]
            raise ImageCopyError("ActorDiedError: the actor died unexpectedly")


def as_built(image: Path) -> None:
    """Record the image's contents as what its build produced (a test changed them to stand for another build's)."""
    cache = ImageCache(image.parent)
    manifest = cache.manifest(image.name)
    assert manifest is not None
    cache.write_manifest(replace(manifest, contents=record_contents(image).digest))


def node(tmp_path: Path, name: str) -> StepRunner:
    return StepRunner(WorkerSlot(name, (), tmp_path / name / "worktree"), image_root=tmp_path / name / "images")


def run(
    runner: StepRunner, request_path: Path, sha: str, step_id: int, peer: HolderNode | None, **env: str
) -> StepResult:
    return runner.run(image_request(request_path, sha, request_path.parent, step_id, **env), image_peer=peer)


def test_an_image_another_node_holds_is_copied_and_serves_after_the_holder_removed_it(tmp_path: Path, store: Store):
    repo = make_image_repo(tmp_path / "repo")
    builds = tmp_path / "builds"
    built = run(node(tmp_path, "far"), repo.path, repo.shas[0], 1, None, BUILD_COUNTER=str(builds))
    assert built.verdict is Verdict.GOOD, built.detail
    assert built.image is not None
    holder = HolderNode(tmp_path / "far" / "images")

    near = node(tmp_path, "near")
    copied = run(near, repo.path, repo.shas[0], 2, holder, BUILD_COUNTER=str(builds))

    assert copied.verdict is Verdict.GOOD, copied.detail  # test.sh checks it runs on this image's venv
    assert copied.samples == (10.0,)
    assert copied.image is not None
    assert (copied.image.id, copied.image.source, copied.image.reused) == (built.image.id, "copied", False)
    assert Path(copied.image.path) == tmp_path / "near" / "images" / built.image.id
    assert builds.read_text().splitlines() == ["build at 0"]  # built once, on the far node
    assert holder.sent_chunks >= 1
    log = Path(copied.log_path).read_text()
    assert f"copying it from {holder.cache.node}" in log
    assert "copied from" in log
    manifest = ImageCache(tmp_path / "near" / "images").manifest(built.image.id)
    assert manifest is not None
    assert (manifest.source, manifest.sha, manifest.status.value) == ("copied", repo.shas[0], "ready")

    far_folder = str(tmp_path / "far" / "images" / built.image.id)
    for path in Path(copied.image.path).rglob("*"):  # no text file or link points back at the holder's copy
        if path.is_symlink():
            assert not os.readlink(path).startswith(far_folder), path
        elif path.is_file() and path.stat().st_size < 1 << 20:
            data = path.read_bytes()
            assert b"\0" in data[:8192] or far_folder.encode() not in data, path

    shutil.rmtree(tmp_path / "far" / "images")  # the copy stands alone: its venv, editable install and library
    again = run(near, repo.path, repo.shas[1], 3, None, BUILD_COUNTER=str(builds))
    assert again.verdict is Verdict.GOOD, again.detail
    assert again.image is not None
    assert (again.image.id, again.image.source, again.image.reused) == (built.image.id, "cache", True)
    assert builds.read_text().splitlines() == ["build at 0"]
    now = datetime.now(UTC)  # the copy's own step left no row (its result was lost): the reuse's row says copied
    step = store.start_step(store.create_bisect(str(repo.path), repo.shas[0], repo.shas[1], {}, now), repo.shas[1],
                            1, "w", again.image.node, (), now)  # fmt: skip
    store.finish_step(step, replace(again, step_id=step), now)
    assert [(row.id, row.source) for row in store.images()] == [(built.image.id, "copied")]


@pytest.mark.parametrize(
    ("holder_kind", "note"),
    [
        (HolderNode, None),  # the holder has no such image (evicted since): nothing is copied
        (OtherInterpreterNode, "its venv is made on /opt/other/bin/python3.12"),
        (OtherFormatNode, "its manifest is of another format"),
        (BrokenStreamNode, "the copy from"),
    ],
)
def test_without_a_usable_copy_the_node_builds_the_image_itself(tmp_path: Path, holder_kind: type[HolderNode], note):
    repo = make_image_repo(tmp_path / "repo")
    builds = tmp_path / "builds"
    far_root = tmp_path / "far" / "images"
    if note is not None:  # the holder has the image
        assert run(node(tmp_path, "far"), repo.path, repo.shas[0], 1, None, BUILD_COUNTER=str(builds)).image
    holder = holder_kind(far_root)

    result = run(node(tmp_path, "near"), repo.path, repo.shas[0], 2, holder, BUILD_COUNTER=str(builds))

    assert result.verdict is Verdict.GOOD, result.detail
    assert result.image is not None
    assert (result.image.source, result.image.reused) == ("built", False)
    assert builds.read_text().splitlines()[-1] == "build at 0"
    assert len(builds.read_text().splitlines()) == (1 if note is None else 2)
    log = Path(result.log_path).read_text()
    if note is not None:
        assert note in log
        assert "building it here" in log
    leftovers = [p.name for p in (tmp_path / "near" / "images").iterdir() if p.name.startswith(".incoming")]
    assert leftovers == []


def test_a_copy_stops_between_chunks_when_told(tmp_path: Path):
    chunks = iter([b"x" * 10, b"y" * 10])
    with pytest.raises(CopyStoppedError):
        receive(chunks, tmp_path / "incoming", should_stop=lambda: True)


def test_a_stream_that_is_not_an_archive_fails_the_copy_with_tars_reason(tmp_path: Path):
    with pytest.raises(ImageCopyError, match="tar"):
        receive([b"not a tar archive" * 100], tmp_path / "incoming", should_stop=lambda: False)


def test_relocation_rewrites_text_and_links_into_the_old_folder(tmp_path: Path):
    old, new = "/srv/far/images/abc123", str(tmp_path / "img")
    folder = tmp_path / "img"
    (folder / "venv" / "bin").mkdir(parents=True)
    script = folder / "venv" / "bin" / "tool"
    script.write_text(f"#!{old}/venv/bin/python\nprint('hi')\n")
    script.chmod(0o755)
    compiled = folder / "venv" / "__pycache__" / "tool.cpython-311.pyc"
    compiled.parent.mkdir()
    compiled.write_bytes(b"\xa7\r\r\n\0\0" + f"{old}/venv/tool.py".encode())  # its paths show only in tracebacks
    binary = folder / "lib.so"
    binary.write_bytes(b"\x7fELF\0\0no path of the holder here")
    (folder / "venv" / "src-link").symlink_to(f"{old}/src")
    (folder / "venv" / "base-link").symlink_to("/usr/bin/python3")

    assert relocate(folder, old, new) == 2

    assert script.read_text() == f"#!{new}/venv/bin/python\nprint('hi')\n"
    assert os.access(script, os.X_OK)
    assert compiled.read_bytes() == b"\xa7\r\r\n\0\0" + f"{old}/venv/tool.py".encode()
    assert binary.read_bytes() == b"\x7fELF\0\0no path of the holder here"
    assert os.readlink(folder / "venv" / "src-link") == f"{new}/src"
    assert os.readlink(folder / "venv" / "base-link") == "/usr/bin/python3"


@pytest.mark.parametrize("size", [100, REWRITE_MAX_BYTES + 100])
def test_a_binary_or_a_huge_file_naming_the_holders_folder_refuses_the_copy(tmp_path: Path, size: int):
    """An RPATH or a path compiled in cannot be rewritten: the copy would load nothing on this node."""
    old, folder = "/srv/far/images/abc123", tmp_path / "img"
    folder.mkdir()
    named = f"{old}/src/build".encode()
    filler = (b"\0" if size < REWRITE_MAX_BYTES else b"x") * (size - len(named) - 8)
    (folder / "libstack.so").write_bytes(b"\x7fELF\0\0\0\0" + filler + named)
    with pytest.raises(ImageCopyError, match="names the holder's folder"):
        relocate(folder, old, str(folder))


def test_an_image_whose_library_names_the_holders_folder_is_built_not_copied(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    builds = tmp_path / "builds"
    built = run(node(tmp_path, "far"), repo.path, repo.shas[0], 1, None, BUILD_COUNTER=str(builds))
    assert built.image is not None
    library = Path(built.image.path) / "src" / "libvalue.so"
    library.write_bytes(library.read_bytes() + f"\0RUNPATH={built.image.path}/src\0".encode())  # as -rpath would
    as_built(Path(built.image.path))

    result = run(node(tmp_path, "near"), repo.path, repo.shas[0], 2, HolderNode(tmp_path / "far" / "images"),
                 BUILD_COUNTER=str(builds))  # fmt: skip

    assert result.verdict is Verdict.GOOD, result.detail
    assert result.image is not None
    assert result.image.source == "built"
    assert "libvalue.so is a binary that names the holder's folder" in Path(result.log_path).read_text()
    assert builds.read_text().splitlines() == ["build at 0", "build at 0"]


def test_what_a_killed_copy_left_is_removed_by_the_next_build(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    near = node(tmp_path, "near")
    first = run(near, repo.path, repo.shas[0], 1, None)
    assert first.image is not None
    folder = Path(first.image.path)
    shutil.rmtree(folder)  # as if evicted, and a copy of it was killed half-way
    left = incoming_dir(folder)
    (left / "venv").mkdir(parents=True)
    (left / "venv" / "half-written").write_bytes(b"x" * 1000)

    again = run(near, repo.path, repo.shas[0], 2, None)

    assert again.verdict is Verdict.GOOD, again.detail
    assert again.image is not None
    assert again.image.source == "built"
    assert not left.exists()


def test_a_copy_renamed_into_place_without_its_manifest_is_replaced_by_the_next_step(tmp_path: Path):
    """A kill between the rename of the copy into place and its manifest's write leaves the image's folder whole but
    without a manifest (the state is made here by removing it): the next step wanting the image takes it for absent
    and replaces it, copying it again or building it, and never runs on it as it is."""
    repo = make_image_repo(tmp_path / "repo")
    builds = tmp_path / "builds"
    assert run(node(tmp_path, "far"), repo.path, repo.shas[0], 1, None, BUILD_COUNTER=str(builds)).image
    holder = HolderNode(tmp_path / "far" / "images")
    near = node(tmp_path, "near")
    copied = run(near, repo.path, repo.shas[0], 2, holder)
    assert copied.image is not None
    folder = Path(copied.image.path)

    for step_id, peer in ((3, holder), (4, None)):
        (folder / "manifest.json").unlink()
        (folder / "src" / "left-by-the-killed-copy").write_text("x")
        again = run(near, repo.path, repo.shas[0], step_id, peer, BUILD_COUNTER=str(builds))
        assert again.verdict is Verdict.GOOD, again.detail
        assert again.image is not None
        assert (again.image.source, again.image.reused) == ("copied" if peer else "built", False)
        assert not (folder / "src" / "left-by-the-killed-copy").exists()
        manifest = ImageCache(tmp_path / "near" / "images").manifest(copied.image.id)
        assert manifest is not None
        assert manifest.status is ImageStatus.READY
    assert builds.read_text().splitlines() == ["build at 0", "build at 0"]


def test_relocation_rewrites_links_to_directories_too(tmp_path: Path):
    """os.walk lists a link to a directory among the directories: it is rewritten as any other link, even where the
    holder's folder also exists on this node."""
    old_folder, folder = tmp_path / "far" / "abc123", tmp_path / "near" / "abc123"
    (old_folder / "venv" / "lib").mkdir(parents=True)
    (folder / "venv" / "lib").mkdir(parents=True)
    (folder / "venv" / "lib-link").symlink_to(old_folder / "venv" / "lib")
    (folder / "top-link").symlink_to(old_folder)

    assert relocate(folder, str(old_folder), str(folder)) == 2

    assert os.readlink(folder / "venv" / "lib-link") == str(folder / "venv" / "lib")
    assert os.readlink(folder / "top-link") == str(folder)


def test_a_file_the_holders_step_writes_while_it_is_sent_does_not_fail_the_copy(tmp_path: Path):
    """The holder's own step runs in the image meanwhile (its tests write there): tar says 'file changed as we read
    it' and exits 1, and the archive is whole."""
    root = tmp_path / "far" / "images"
    cache = ImageCache(root)
    made = now_iso()
    cache.write_manifest(
        ImageManifest("0123456789abcdef", {}, "repo", "0" * 40, cache.node, ImageStatus.READY, made, made)
    )
    output = cache.image_dir("0123456789abcdef") / "src" / "output.log"
    output.parent.mkdir()
    output.write_bytes(b"a" * (4 * CHUNK_BYTES))
    chunks = archive_chunks(cache, "0123456789abcdef")
    first = next(chunks)  # tar waits now, half-way through the file
    with output.open("ab") as log:
        log.write(b"b" * 100)

    receive([first, *chunks], tmp_path / "near" / "incoming", should_stop=lambda: False)

    copied = tmp_path / "near" / "incoming" / "src" / "output.log"
    assert copied.read_bytes()[: 4 * CHUNK_BYTES] == b"a" * (4 * CHUNK_BYTES)


RECEIVER = """
import sys, time
from pathlib import Path
from bisector.workers.images.builder import incoming_dir
from bisector.workers.images.cache import ImageCache
from bisector.workers.images.transfer import archive_chunks, receive

far, near, image_id, ready = ImageCache(Path(sys.argv[1])), ImageCache(Path(sys.argv[2])), sys.argv[3], sys.argv[4]

def stalling():
    chunks = archive_chunks(far, image_id)
    yield next(chunks)
    Path(ready).touch()
    time.sleep(3600)  # killed here, half-way through the unpacking

with near.lock(image_id):  # as ImageBuilder._copy holds it
    receive(stalling(), incoming_dir(near.image_dir(image_id)), should_stop=lambda: False)
"""


def test_what_a_killed_copy_left_is_removed_by_the_next_eviction_of_any_image(tmp_path: Path):
    """kill -9 of the receiving process mid-unpack: its half copy is never taken for the image, and the next LRU
    pass (another image's build or copy, `bisect images prune`) removes it even when that image is not wanted again."""
    far, near, image_id = ImageCache(tmp_path / "far"), ImageCache(tmp_path / "near"), "0123456789abcdef"
    made = now_iso()
    far.write_manifest(ImageManifest(image_id, {}, "repo", "0" * 40, far.node, ImageStatus.READY, made, made))
    (far.image_dir(image_id) / "big.bin").write_bytes(b"x" * (4 * CHUNK_BYTES))
    ready = tmp_path / "ready"
    command = [sys.executable, "-c", RECEIVER, str(far.root), str(near.root), image_id, str(ready)]
    receiver = subprocess.Popen(command, cwd=ROOT)
    try:
        wait_for(lambda: ready.exists() or receiver.poll() is not None, 120, "the copy to start")
        assert receiver.poll() is None
        left = incoming_dir(near.image_dir(image_id))
        wait_for(lambda: (left / "big.bin").exists(), 120, "the unpacking to start")
    finally:
        receiver.kill()
        receiver.wait()

    assert near.manifest(image_id) is None  # never taken for the image
    unpacking = incoming_dir(near.image_dir("fedcba9876543210"))
    unpacking.mkdir()
    with near.lock("fedcba9876543210"):  # a copy under way: it stays
        assert near.evict(1 << 62) == []
    assert not left.exists()
    assert sorted(entry.name for entry in near.root.iterdir()) == [unpacking.name, "locks"]


def test_the_lru_pass_removes_image_folders_that_killed_copies_or_builds_left(tmp_path: Path, store: Store):
    """A folder without a manifest (a copy killed between its rename into place and its manifest's write) or with a
    "building" one (a killed build), whose lock is free, is no image: `bisect images prune` (and any LRU pass)
    removes it even when that image is not wanted again. One whose lock is held is being made: it stays."""
    cache, made = ImageCache(tmp_path / "near"), now_iso()
    ready = ImageManifest("3333333333333333", {}, "repo", "0" * 40, cache.node, ImageStatus.READY, made, made)
    cache.write_manifest(ready)
    cache.write_manifest(replace(ready, id="2222222222222222", status=ImageStatus.BUILDING))
    for image_id in ("0123456789abcdef", "1111111111111111", "2222222222222222"):
        (cache.image_dir(image_id) / "venv" / "bin").mkdir(parents=True)
        (cache.image_dir(image_id) / "venv" / "bin" / "python").write_text("#!/bin/sh\n")
    cache.ccache_dir.mkdir()

    with cache.lock("1111111111111111"):  # a copy renamed into place, its manifest about to be written
        assert prune_images(store, cache, max_bytes=1 << 62, older_than_s=None) == []

    assert sorted(entry.name for entry in cache.root.iterdir()) == [
        "1111111111111111", "3333333333333333", "ccache", "locks"
    ]  # fmt: skip


class GatedNode(HolderNode):
    """A holder that sends its first chunk, then waits for the gate."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.streaming, self.gate = threading.Event(), threading.Event()

    def chunks(self, image_id: str, should_stop: Callable[[], bool] = lambda: False) -> Iterator[bytes]:
        for chunk in super().chunks(image_id, should_stop):
            yield chunk
            self.streaming.set()
            assert self.gate.wait(120)


def waits_for_an_image_lock(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code is ImageCache.lock.__wrapped__.__code__:  # type: ignore[attr-defined]
            return True
        frame = frame.f_back
    return False


def waits_for_the_lock_of(thread: threading.Thread, cache: ImageCache) -> bool:
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code is ImageCache.lock.__wrapped__.__code__ and frame.f_locals.get("self") is cache:  # type: ignore[attr-defined]
            return True
        frame = frame.f_back
    return False


def test_a_cancel_ends_the_copy_while_the_holder_waits_for_its_image(tmp_path: Path):
    """The holder's image is locked there (being removed or rebuilt): the holder waits for its shared lock, for up to
    HOLD_TIMEOUT_S. The step's cancel ends the copy at once, the holder's wait not over: the step is cancelled, and
    nothing is built or left."""
    repo = make_image_repo(tmp_path / "repo")
    builds = tmp_path / "builds"
    built = run(node(tmp_path, "far"), repo.path, repo.shas[0], 1, None, BUILD_COUNTER=str(builds))
    assert built.image is not None
    holder = HolderNode(tmp_path / "far" / "images")
    request = replace(
        image_request(repo.path, repo.shas[0], tmp_path, 2, BUILD_COUNTER=str(builds)), timeout_s=SAFETY_S
    )
    cancel, results = threading.Event(), dict[str, StepResult]()
    near = node(tmp_path, "near")
    step = threading.Thread(
        target=lambda: results.update(step=near.run(request, should_cancel=cancel.is_set, image_peer=holder))
    )
    with holder.cache.lock(built.image.id):  # held until the step has ended
        step.start()
        try:
            wait_for(lambda: waits_for_the_lock_of(step, holder.cache), SAFETY_S, "the holder to wait for its image")
            cancel.set()
            step.join(SAFETY_S)
            assert not step.is_alive(), "the copy waits for the holder after the cancel"
        finally:
            cancel.set()
    step.join()

    result = results["step"]
    assert result.verdict is Verdict.CANCELLED, result.detail
    assert "stopped while the holder waited for its image's lock" in Path(result.log_path).read_text()
    assert builds.read_text().splitlines() == ["build at 0"]
    assert [entry.name for entry in (tmp_path / "near" / "images").iterdir()] == ["locks"]


def test_a_second_step_on_the_node_uses_the_copy_while_the_first_still_runs_its_test(tmp_path: Path):
    """Two steps of a node want the image at once: one copies it, and the other, which asked for the image's
    exclusive lock meanwhile, runs on that copy as soon as it is ready, not once the first step's test is over."""
    repo = make_image_repo(tmp_path / "repo")
    assert run(node(tmp_path, "far"), repo.path, repo.shas[0], 1, None).image is not None
    holder = GatedNode(tmp_path / "far" / "images")
    release = tmp_path / "release"
    first = image_request(repo.path, repo.shas[0], tmp_path, 2)
    first = replace(first, run_cmd=f"while [ ! -e {release} ]; do sleep 0.05; done; bash test.sh")
    second = replace(image_request(repo.path, repo.shas[1], tmp_path, 3), timeout_s=SAFETY_S)
    beside = StepRunner(
        WorkerSlot("near2", (), tmp_path / "near2" / "worktree"), image_root=tmp_path / "near" / "images"
    )
    results: dict[str, StepResult] = {}
    copying = threading.Thread(
        target=lambda: results.update(copied=node(tmp_path, "near").run(first, image_peer=holder))
    )
    waiting = threading.Thread(target=lambda: results.update(reused=beside.run(second, image_peer=holder)))
    copying.start()
    try:
        assert holder.streaming.wait(120)
        waiting.start()
        wait_for(lambda: waits_for_an_image_lock(waiting), 120, "the second step to wait for the image")
        holder.gate.set()
        waiting.join(SAFETY_S / 2)
        assert not waiting.is_alive(), "the second step still waits while the first one's test runs"
    finally:
        holder.gate.set()
        release.touch()
        copying.join(120)

    copied, reused = results["copied"], results["reused"]
    assert copied.image is not None
    assert (copied.verdict, copied.image.source) == (Verdict.GOOD, "copied"), copied.detail
    assert reused.image is not None
    assert (reused.verdict, reused.image.source, reused.image.reused) == (Verdict.GOOD, "cache", True), reused.detail


def test_relocation_between_folders_of_one_path_touches_nothing(tmp_path: Path):
    """Nodes whose cache roots have the same path (the same home on each): the copy is used as it came."""
    folder = tmp_path / "img"
    (folder / "venv" / "bin").mkdir(parents=True)
    script = folder / "venv" / "bin" / "tool"
    script.write_text(f"#!{folder}/venv/bin/python\n")
    os.link(script, folder / "venv" / "bin" / "tool-again")
    before = script.stat()

    assert relocate(folder, str(folder), str(folder)) == 0

    after = script.stat()
    assert (after.st_ino, after.st_nlink, after.st_mtime_ns) == (before.st_ino, 2, before.st_mtime_ns)


def test_relocation_keeps_a_rewritten_files_times(tmp_path: Path):
    """A build's generated files (CMakeCache.txt, a Makefile's dependency files) keep their times: a make or cmake
    the test runs finds its outputs up to date, as on the holder, rather than rebuilding or reconfiguring."""
    old, folder = "/srv/far/images/abc123", tmp_path / "img"
    (folder / "src" / "build").mkdir(parents=True)
    generated = folder / "src" / "build" / "CMakeCache.txt"
    generated.write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={old}/src\n")
    os.utime(generated, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))

    assert relocate(folder, old, str(folder)) == 1

    assert generated.read_text() == f"CMAKE_HOME_DIRECTORY:INTERNAL={folder}/src\n"
    assert generated.stat().st_mtime_ns == 1_000_000_000_000_000_000


def test_a_sparse_file_stays_sparse_in_the_copy(tmp_path: Path):
    """A large file that is mostly holes (a preallocated cache, a core file) takes no more disk on the receiver."""
    cache, image_id = ImageCache(tmp_path / "far"), "0123456789abcdef"
    made = now_iso()
    cache.write_manifest(ImageManifest(image_id, {}, "repo", "0" * 40, cache.node, ImageStatus.READY, made, made))
    with (cache.image_dir(image_id) / "holes.bin").open("wb") as holes:
        holes.write(b"data")
        holes.truncate(64 * CHUNK_BYTES)
    if (cache.image_dir(image_id) / "holes.bin").stat().st_blocks * 512 >= CHUNK_BYTES:
        pytest.skip("this filesystem keeps no holes")

    receive(archive_chunks(cache, image_id), tmp_path / "near", should_stop=lambda: False)

    copied = (tmp_path / "near" / "holes.bin").stat()
    assert copied.st_size == 64 * CHUNK_BYTES
    assert copied.st_blocks * 512 < CHUNK_BYTES


SENDER = """
import sys
from pathlib import Path
from bisector.workers.images.cache import ImageCache
from bisector.workers.images.transfer import archive_chunks

print(sum(len(chunk) for chunk in archive_chunks(ImageCache(Path(sys.argv[1])), sys.argv[2])))
"""


def test_a_holder_whose_tar_warns_a_lot_still_sends_its_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """tar's warnings (a socket ignored, a file that changed) went to a pipe read only at its end: past 64 KiB tar
    waited on it while the holder waited on tar's archive, for ever."""
    cache, image_id = ImageCache(tmp_path / "far"), "0123456789abcdef"
    made = now_iso()
    cache.write_manifest(ImageManifest(image_id, {}, "repo", "0" * 40, cache.node, ImageStatus.READY, made, made))
    sockets = cache.image_dir(image_id) / "src" / "run"
    sockets.mkdir(parents=True)
    monkeypatch.chdir(sockets)  # a socket's path is short
    for index in range(3000):  # a test's servers left them: tar says "socket ignored" for each
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(f"s{index:04d}")

    command = [sys.executable, "-c", SENDER, str(cache.root), image_id]
    sent = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert sent.returncode == 0, sent.stderr
    assert int(sent.stdout) > 0
