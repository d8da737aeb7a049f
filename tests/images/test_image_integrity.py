"""An image is checked against the record of what its build produced before each reuse, and a test runs in its own
copy of the image's tree and venv: a damaged image is made again, never tested on, and no test changes the image
the next one runs on. Real images: a uv venv with an editable install and a C library (tests/images/image_repo.py);
gcc without ccache where there is none."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from bisect_helpers import cli_env, run_cli
from image_repo import BUILD_CMD, image_request, make_image_repo, run_at

from bisector.workers.images.cache import ImageCache, ImageManifest, ImageStatus, now_iso
from bisector.workers.images.contents import ImageDamageError, check_contents, record_contents
from bisector.workers.images.transfer import CacheHolder
from bisector.workers.step import StepRunner, WorkerSlot

COMPILER = {} if shutil.which("ccache") else {"CC": "gcc"}
EXIT_CODE_TEST = (
    "python -c \"import ctypes, tinypkg; raise SystemExit(0 if ctypes.CDLL('./libvalue.so').value() >= 8 else 1)\""
)


def delete_a_build_output(image: Path) -> None:
    (image / "src" / "libvalue.so").unlink()


def truncate_the_venvs_python(image: Path) -> None:
    """The venv's python made a file cut short (its link replaced: truncating through it would cut the base's)."""
    python = image / "venv" / "bin" / "python"
    head = Path(os.path.realpath(python)).read_bytes()[:4096]
    python.unlink()
    python.write_bytes(head)
    python.chmod(0o755)


def ready_images() -> list[ImageManifest]:
    return [m for m in ImageCache().manifests() if m.status is ImageStatus.READY]


@pytest.mark.parametrize("damage", [delete_a_build_output, truncate_the_venvs_python])
def test_a_damaged_image_is_rebuilt_and_the_bisect_names_the_right_culprit(
    tmp_path: Path, damage: Callable[[Path], None]
):
    repo = make_image_repo(tmp_path / "repo", values=(10, 10, 10, 5, 5))
    db = tmp_path / "bisect.db"
    args = ["start", "--repo", str(repo.path), "--good", repo.shas[0], "--bad", "main", "--build", BUILD_CMD,
            "--run", EXIT_CODE_TEST, "--image", "venv", "--executor", "inprocess", "--no-explain",
            "--format", "json"]  # fmt: skip
    first = run_cli(*args, env=cli_env(db, **COMPILER))
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["first_bad"]["sha"] == repo.shas[3]
    good_images = [m for m in ready_images() if m.sha in repo.shas[:3]]
    assert good_images
    for manifest in good_images:
        damage(ImageCache().image_dir(manifest.id))

    again = run_cli(*args, env=cli_env(db, **COMPILER))
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["first_bad"]["sha"] == repo.shas[3]
    rebuilt = {s["image"]["id"]: s for s in report["steps"] if s["image"] and s["image"].get("replaced")}
    assert set(rebuilt) == {m.id for m in good_images}
    for step in rebuilt.values():
        assert step["verdict"] == "good"
        assert (step["image"]["source"], step["image"]["reused"]) == ("built", False)
        assert "differ from their record" in step["image"]["replaced"]
        assert damage.__name__ != "delete_a_build_output" or "src/libvalue.so missing" in step["image"]["replaced"]
        assert damage.__name__ == "delete_a_build_output" or "venv/bin/python changed" in step["image"]["replaced"]
    text = run_cli("report", str(report["id"]), env=cli_env(db, COLUMNS="240")).stdout
    assert "rebuilt (damaged)" in text, text
    listed = json.loads(run_cli("images", "ls", "--format", "json", db=db).stdout)
    assert {row["id"] for row in listed if row["source"] == "rebuilt"} == set(rebuilt)


def test_a_test_cannot_change_the_venv_or_tree_the_next_test_runs_with(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", values=(10,))
    db = tmp_path / "bisect.db"
    places = '"$VIRTUAL_ENV" "$(python -c "import sys; print(sys.prefix)")" "$BISECT_IMAGE_DIR"'
    poison = (
        f'for place in {places}; do test -e "$place/poison" && echo POISONED; done; '
        f'for place in {places}; do touch "$place/poison"; done; '
        "echo 'raise SystemExit(9)' > \"$VIRTUAL_ENV/bin/tinyscript\"; bash test.sh"
    )
    with pytest.MonkeyPatch.context() as patch:
        for name, value in COMPILER.items():
            patch.setenv(name, value)
        answer = run_at(repo.path, "main", db, "--image", "venv", "--repeat", "3", "--run", poison)
    runs = answer["runs"]
    assert isinstance(runs, list)
    assert len(runs) == 3
    assert [run["verdict"] for run in runs] == ["good"] * 3, runs  # the venv's copy works: tinypkg, its prefix
    logs = [Path(run["log"]).read_text() for run in runs]
    assert sum(log.splitlines().count("POISONED") for log in logs) == 0, logs
    image = ImageCache().image_dir(str(answer["image"]["id"]))  # type: ignore[index]
    assert not (image / "venv" / "poison").exists()
    assert not (image / "venv" / "bin" / "tinyscript").exists()
    check_contents(image, ImageCache().manifest(image.name).contents)  # type: ignore[union-attr]


def test_an_image_whose_copy_differs_from_the_holders_record_is_built_here(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", values=(10,))
    far = StepRunner(WorkerSlot("far", (), tmp_path / "far" / "worktree"), image_root=tmp_path / "far" / "images")
    near = StepRunner(WorkerSlot("near", (), tmp_path / "near" / "worktree"), image_root=tmp_path / "near" / "images")
    built = far.run(image_request(repo.path, repo.shas[0], tmp_path, 1, **COMPILER))
    assert built.verdict.value == "good", built.detail
    assert built.image is not None
    delete_a_build_output(tmp_path / "far" / "images" / built.image.id)

    holder = CacheHolder(ImageCache(tmp_path / "far" / "images"))
    copied = near.run(image_request(repo.path, repo.shas[0], tmp_path, 2, **COMPILER), image_peer=holder)
    assert copied.verdict.value == "good", copied.detail
    assert copied.image is not None
    assert copied.image.source == "built"
    log = Path(copied.log_path).read_text()
    assert "src/libvalue.so missing" in log, log
    assert "building it here" in log


def test_any_change_to_a_recorded_entry_is_found_even_with_its_size_and_mtime_kept(tmp_path: Path):
    folder = tmp_path / "0123456789abcdef"
    (folder / "src" / "out").mkdir(parents=True)
    (folder / "src" / "out" / "lib.so").write_bytes(b"\x7fELF" + b"\0" * 100)
    (folder / "venv" / "bin").mkdir(parents=True)
    (folder / "venv" / "bin" / "tool").write_text(f"#!{folder}/venv/bin/python\n")
    (folder / "venv" / "bin" / "python").symlink_to(sys.executable)
    (folder / "triton").mkdir()
    recorded = record_contents(folder)
    assert recorded.naming_folder == ("venv/bin/tool",)
    assert check_contents(folder, recorded.digest) == recorded
    (folder / "triton" / "kernel").write_text("tests fill Triton's cache: not recorded")
    assert check_contents(folder, recorded.digest) == recorded

    library = folder / "src" / "out" / "lib.so"
    held = library.stat()
    library.write_bytes(b"\x7fELF" + b"\1" * 100)
    os.utime(library, ns=(held.st_atime_ns, held.st_mtime_ns))
    with pytest.raises(ImageDamageError, match=r"src/out/lib\.so changed"):
        check_contents(folder, recorded.digest)
    library.write_bytes(b"\x7fELF" + b"\0" * 100)
    assert check_contents(folder, recorded.digest) == recorded  # the same bytes again: hashed, found unchanged

    (folder / "src" / "out" / "extra").write_text("")
    (folder / "venv" / "bin" / "python").unlink()
    with pytest.raises(ImageDamageError) as damaged:
        check_contents(folder, recorded.digest)
    assert "src/out/extra added" in str(damaged.value)
    assert "venv/bin/python missing" in str(damaged.value)
    with pytest.raises(ImageDamageError, match="no record"):
        check_contents(folder, "")


def test_workers_on_threads_of_one_process_marking_one_image_damaged_at_once_each_write_a_whole_manifest(
    tmp_path: Path,
):
    """The in-process executor's workers are threads: two that find one image damaged at once both mark it (as a
    third touches it), and a reader meanwhile always finds a whole manifest."""
    cache = ImageCache(tmp_path / "images")
    ready = ImageManifest(id="0123456789abcdef", key={}, repo="repo", sha="a" * 40, node=cache.node,
                          status=ImageStatus.READY, created=now_iso(), last_used=now_iso())  # fmt: skip
    cache.write_manifest(ready)
    damaged = [replace(ready, status=ImageStatus.DAMAGED, damage=damage) for damage in ("a", "a long one " * 99)]
    start = threading.Barrier(4)
    failures: list[BaseException] = []
    unreadable = 0

    def mark(manifest: ImageManifest) -> None:
        start.wait()
        try:
            for _ in range(300):
                cache.write_manifest(manifest)
                cache.touch(manifest)
        except OSError as exc:
            failures.append(exc)

    def read() -> None:
        nonlocal unreadable
        start.wait()
        for _ in range(600):
            unreadable += cache.manifest(ready.id) is None

    threads = [threading.Thread(target=mark, args=(m,)) for m in (*damaged, ready)] + [threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert unreadable == 0
    assert cache.manifest(ready.id) is not None


@pytest.mark.parametrize("move", ["renamed", "reached through its target"])
def test_an_image_whose_cache_root_moved_is_reused_and_its_test_runs_in_its_own_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, move: str
):
    """An image's venv names the folder it was built in (the editable install's `.pth`): the cache root renamed, or
    first reached through a symlink and then through its target, its test still gets a copy naming the copy."""
    repo = make_image_repo(tmp_path / "repo", values=(10,))
    db = tmp_path / "bisect.db"
    for name, value in COMPILER.items():
        monkeypatch.setenv(name, value)
    before, after = tmp_path / "cache", tmp_path / "moved"
    if move == "renamed":
        monkeypatch.setenv("BISECT_CACHE_DIR", str(before))
        run_at(repo.path, "main", db, "--image", "venv")
        before.rename(after)
    else:
        after.mkdir()
        before.symlink_to(after)
        monkeypatch.setenv("BISECT_CACHE_DIR", str(before))
        run_at(repo.path, "main", db, "--image", "venv")
    monkeypatch.setenv("BISECT_CACHE_DIR", str(after))
    (listed,) = json.loads(run_cli("images", "ls", "--format", "json", db=db).stdout)
    assert listed["path"] == str(after / "images" / listed["id"])

    where = "python -c 'import tinypkg; print(\"tinypkg from\", tinypkg.__file__)'; bash test.sh"
    answer = run_at(repo.path, "main", db, "--image", "venv", "--run", where)
    (run,) = answer["runs"]  # type: ignore[misc]
    assert (run["verdict"], run["image"]["reused"]) == ("good", True), run["detail"]
    assert f"tinypkg from {after}/images/{listed['id']}/runs/" in Path(run["log"]).read_text()
    pruned = run_cli("images", "prune", "--max-size", "1", db=db)
    assert pruned.stdout.strip() == f"removed 1 image(s): {listed['id']}"
    assert json.loads(run_cli("images", "ls", "--format", "json", db=db).stdout) == []


def test_a_file_changed_again_within_its_timestamp_tick_after_the_record_is_found(tmp_path: Path):
    """Timestamps move in ticks (whole seconds on some filesystems), so a file written just before the record could
    change again and keep its stat. A write through a shared mapping whose page is already dirty moves no timestamp
    at all: it stands for such a change on any filesystem."""
    folder = tmp_path / "0123456789abcdef"
    (folder / "src").mkdir(parents=True)
    library = folder / "src" / "lib.so"
    library.write_bytes(b"\x7fELF" + b"\0" * 4092)
    with library.open("r+b") as file, mmap.mmap(file.fileno(), 0) as mapped:
        mapped[4] = 1  # the build's last write: its page is dirty and writable from now on
        recorded = record_contents(folder)
        held = library.stat()
        mapped[5] = 1
    changed = library.stat()
    assert (changed.st_mtime_ns, changed.st_ctime_ns) == (held.st_mtime_ns, held.st_ctime_ns), "the setup is void"
    with pytest.raises(ImageDamageError, match=r"src/lib\.so changed"):
        check_contents(folder, recorded.digest)
