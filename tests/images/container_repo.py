"""Container images for tests/images: a base image made offline from Debian's busybox-static, a repository whose
commits build on it (a Containerfile running build.sh), and podman called directly."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

from image_repo import commit, init_repo

BASE = "localhost/bisect-test-base"
BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "cat", "echo", "pwd", "sleep", "test", "[", "mkdir")
HOST_CONF = Path(__file__).with_name("containers.conf")
CONTAINERFILE = f"FROM {BASE}\nCOPY . /stack\nRUN sh /stack/build.sh\n"
BUILD = """set -e
if [ -d /count ]; then echo "build at $(cat /stack/version)" >> /count/builds; fi
while [ -e /count/hold ]; do sleep 1; done
if [ -e /stack/broken ]; then echo "error: the stack does not build"; exit 3; fi
if [ -e /stack/offline ]; then echo "pip: [Errno 111] Connection refused"; exit 1; fi
cat /stack/value > /stack/built
echo built
"""
RUN = 'echo "metric: $(cat /stack/built)"; echo "in $(pwd) tag=$TAG value=$(cat value)"'
METRIC = ("--metric", r"metric: ([0-9.]+)", "--expect", ">= 8")


def podman_cmd(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300, check=check)


def base_image(into: Path) -> None:
    """The base image, offline: busybox and its applets in a tarball, imported."""
    tarball = into / "base.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(BUSYBOX, "bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    podman_cmd("import", str(tarball), BASE)


def probe(into: Path) -> str:
    """Why podman cannot run a container here ("" when it can)."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc)"
    if not BUSYBOX.is_file():
        return "no /bin/busybox to make the base image from (apt-get install busybox-static)"
    try:
        if podman_cmd("image", "exists", BASE, check=False).returncode != 0:
            base_image(into)
    except subprocess.CalledProcessError as exc:
        return f"podman import failed: {exc.stderr.strip()[-300:]}"
    ran = podman_cmd("run", "--rm", BASE, "sh", "-c", "echo ran", check=False)
    return "" if ran.stdout.strip() == "ran" else f"podman run failed: {ran.stderr.strip()[-300:]}"


def container_repo(path: Path, values: tuple[int, ...], broken: int = -1) -> list[str]:
    """One commit per value (its file `value`), broken at index broken. Where a test mounts a folder at /count
    (BISECT_CONTAINER_BUILD_ARGS=--volume DIR:/count), each build appends a line to its file `builds`, then waits
    while its file `hold` is there.
    Its commits are this repository's alone (a random file in the first)."""
    init_repo(path)
    shas = []
    for index, value in enumerate(values):
        files = {"value": f"{value}\n", "version": f"{index}\n"}
        if index == 0:
            files.update({"Containerfile": CONTAINERFILE, "build.sh": BUILD, "origin": f"{uuid.uuid4()}\n"})
        shas.append(commit(path, f"value {value}", {**files, **({"broken": ""} if index == broken else {})}))
    return shas
