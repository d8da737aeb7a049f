"""Read-only folders inside an image (a package that installs its folders with mode 0555), for a user other than
root: a copy's rewrite of the holder's path, and the removal of an image or of a half copy, still work.

Run as root, each case runs in a subprocess without the capabilities that let root ignore file modes (setpriv drops
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH), so the kernel checks modes as it does for any user; run as a user, directly.
GNU tar's unpacking is not covered so: tar run by uid 0 creates each folder with its final mode at once, whereas run
by any other user it keeps them writable by their owner until its end (its `we_are_root`). So the unpacking of a
copy runs as a real other user (`nobody`, setpriv --reuid), where root can switch to one."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bisector.workers.images.builder import incoming_dir
from bisector.workers.images.cache import ImageCache, ImageManifest, ImageStatus, now_iso
from bisector.workers.images.transfer import archive_chunks

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_ROOTS_RIGHTS = ["--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
AS_A_USER = ["setpriv", *WITHOUT_ROOTS_RIGHTS] if os.geteuid() == 0 else []
RELOCATE = (
    "import sys; from pathlib import Path; from bisector.workers.images.transfer import relocate\n"
    "print(relocate(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))"
)
EVICT = (
    "import sys; from pathlib import Path; from bisector.workers.images.cache import ImageCache\n"
    "print(' '.join(ImageCache(Path(sys.argv[1])).evict(0)))"
)

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
RECEIVE = (
    "import sys; from pathlib import Path; from bisector.vocab.paths import remove_tree\n"
    "from bisector.workers.images.transfer import receive, relocate\n"
    "archive, folder, old, removed = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])\n"
    "receive([archive.read_bytes()], folder, lambda: False)\n"
    "print(relocate(folder, old, str(folder)))\n"
    "receive([archive.read_bytes()], removed, lambda: False)\n"
    "remove_tree(removed)"
)


def can_drop_roots_rights() -> bool:
    if not AS_A_USER:
        return True
    if shutil.which("setpriv") is None:
        return False
    return subprocess.run([*AS_A_USER, "true"], capture_output=True, check=False).returncode == 0


pytestmark = pytest.mark.skipif(not can_drop_roots_rights(), reason="root here, and setpriv cannot drop its rights")


def as_a_user(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [*AS_A_USER, sys.executable, "-c", code, *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def installed_read_only(venv: Path, old: str) -> Path:
    """A package as some installers leave it: its folders 0555, its files 0444; a module and a link name old."""
    package = venv / "lib" / "python3.11" / "site-packages" / "frozenpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"DATA = '{old}/venv/share/frozenpkg'\n")
    (package / "data").symlink_to(f"{old}/venv/share/frozenpkg")
    (package / "__init__.py").chmod(0o444)
    for folder in (package, package.parent):
        folder.chmod(0o555)
    return package


def test_a_copy_rewrites_the_holders_path_inside_read_only_folders(tmp_path: Path):
    old, folder = "/srv/far/images/abc123", tmp_path / "img"
    package = installed_read_only(folder / "venv", old)

    relocated = as_a_user(RELOCATE, str(folder), old, str(folder))

    assert relocated.returncode == 0, relocated.stderr
    assert relocated.stdout.split() == ["2"]
    assert (package / "__init__.py").read_text() == f"DATA = '{folder}/venv/share/frozenpkg'\n"
    assert os.readlink(package / "data") == f"{folder}/venv/share/frozenpkg"
    assert [stat.S_IMODE(p.stat().st_mode) for p in (package, package.parent, package / "__init__.py")] == [
        0o555, 0o555, 0o444
    ]  # fmt: skip


def test_an_image_and_a_half_copy_with_read_only_folders_are_removed(tmp_path: Path):
    """The LRU pass (as `bisect images prune` and every build run it) removes an image and what a killed copy left,
    read-only folders and all; the builder removes a failed copy's part and a killed build's folder the same way."""
    cache, made = ImageCache(tmp_path / "images"), now_iso()
    cache.write_manifest(
        ImageManifest("0123456789abcdef", {}, "r", "0" * 40, cache.node, ImageStatus.READY, made, made)
    )
    installed_read_only(cache.image_dir("0123456789abcdef") / "venv", "/srv/far")
    installed_read_only(incoming_dir(cache.image_dir("fedcba9876543210")) / "venv", "/srv/far")

    evicted = as_a_user(EVICT, str(cache.root))

    assert evicted.returncode == 0, evicted.stderr
    assert evicted.stdout.split() == ["0123456789abcdef"]
    assert [entry.name for entry in cache.root.iterdir()] == ["locks"]


def can_run_as_nobody() -> bool:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return False
    probe = [*AS_NOBODY, sys.executable, "-c", "import bisector.workers.images.transfer"]
    return subprocess.run(probe, cwd=ROOT, capture_output=True, check=False).returncode == 0


@pytest.fixture
def nobodys_folder() -> Iterator[Path]:
    """A folder the user nobody owns, where nobody can reach it (pytest's tmp_path is root's, mode 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="gpu-bisect-nobody-"))
    try:
        os.chmod(folder, 0o755)
        os.chown(folder, NOBODY, NOBODY)
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.skipif(not can_run_as_nobody(), reason="needs root, setpriv and a project the user nobody can read")
def test_a_user_unpacks_and_relocates_a_copy_with_read_only_folders_and_removes_one(nobodys_folder: Path):
    """The holder's image has a package installed read-only. Its copy, unpacked by tar run as another user than root
    (which keeps the folders writable until its end, then sets their modes), is relocated and removed by that user."""
    holder, image_id = ImageCache(nobodys_folder / "holder"), "0123456789abcdef"
    made = now_iso()
    holder.write_manifest(ImageManifest(image_id, {}, "r", "0" * 40, holder.node, ImageStatus.READY, made, made))
    old = str(holder.image_dir(image_id))
    installed_read_only(holder.image_dir(image_id) / "venv", old)
    archive = nobodys_folder / "image.tar"
    archive.write_bytes(b"".join(archive_chunks(holder, image_id)))
    folder, removed = nobodys_folder / "mine" / "img", nobodys_folder / "mine" / "removed"
    (nobodys_folder / "mine").mkdir()
    os.chown(nobodys_folder / "mine", NOBODY, NOBODY)

    received = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", RECEIVE, str(archive), str(folder), old, str(removed)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert received.returncode == 0, received.stderr
    assert received.stdout.split() == ["2"]
    package = folder / "venv" / "lib" / "python3.11" / "site-packages" / "frozenpkg"
    assert (package / "__init__.py").read_text() == f"DATA = '{folder}/venv/share/frozenpkg'\n"
    assert os.readlink(package / "data") == f"{folder}/venv/share/frozenpkg"
    assert [stat.S_IMODE(p.stat().st_mode) for p in (package, package.parent, package / "__init__.py")] == [
        0o555, 0o555, 0o444
    ]  # fmt: skip
    assert package.stat().st_uid == NOBODY
    assert not removed.exists()
