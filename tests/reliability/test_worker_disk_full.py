"""A full disk (a real 1 MiB tmpfs): the step comes back DISK_FULL with where and what to do, the worker serves on,
and once space is freed the same worker runs steps again."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from synthetic import culprit_history
from worker_steps import run_one, step_request

from bisector.vocab.domain import ErrorKind, Verdict
from bisector.workers.local import LocalExecutor


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for the test (root only)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Fill the disk to the last byte; returns the filler file (remove it to free the space)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    return filler


def test_a_full_log_disk_gives_disk_full_and_the_worker_serves_on(
    tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("BISECT_DATA_DIR", str(small_disk))
    history = culprit_history(tmp_path / "repo", 2, 1)
    logs = small_disk / "logs" / "bisect-1"
    loud = "head -c 3000000 /dev/zero | tr '\\0' x; echo; bash test.sh"
    with LocalExecutor(str(history.path), workers=1) as executor:
        pid = executor.worker_pids()["local-0"]
        full = run_one(executor, step_request(history, 1, 0, loud, logs))
        filler = fill(small_disk)
        no_room = run_one(executor, step_request(history, 2, 0, "bash test.sh", logs))
        filler.unlink()
        Path(full.log_path).unlink()
        after = run_one(executor, step_request(history, 3, 1, "bash test.sh", logs))
        assert executor.worker_pids()["local-0"] == pid  # the same worker process throughout
    for result in (full, no_room):
        assert (result.verdict, result.error_kind) == (Verdict.ERROR, ErrorKind.DISK_FULL), result.detail
        assert result.detail.startswith(f"disk full: no space left on {small_disk} ")
        assert "writing the step log" in result.detail or "opening the step log" in result.detail
        assert result.detail.endswith("; free space, then resume the bisect")  # each face says how
    assert after.verdict is Verdict.BAD  # the bad endpoint, judged once there is room
    assert "bash test.sh" in Path(after.log_path).read_text()


def test_a_full_worktree_disk_gives_disk_full(tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BISECT_CACHE_DIR", str(small_disk))
    history = culprit_history(tmp_path / "repo", 3, 2)
    commit = "git -c user.name=t -c user.email=t@example.org commit -qm big"  # no identity configured is fine
    incompressible = "python3 -c 'import random, sys; sys.stdout.buffer.write(random.Random(0).randbytes(400000))'"
    big = f"{incompressible} | base64 > big.txt && git add big.txt && {commit}"
    subprocess.run(["bash", "-c", big], cwd=history.path, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=history.path, capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    with LocalExecutor(str(history.path), workers=1) as executor:
        run_one(
            executor, step_request(history, 1, 0, "true", tmp_path / "logs")
        )  # the slot is made, then the disk fills
        filler = fill(small_disk)
        request = step_request(history, 2, 0, "true", tmp_path / "logs")
        full = run_one(executor, replace(request, sha=sha))
        filler.unlink()
        after = run_one(executor, step_request(history, 3, 2, "bash test.sh", tmp_path / "logs"))
    assert (full.verdict, full.error_kind) == (Verdict.ERROR, ErrorKind.DISK_FULL), full.detail
    assert full.detail.startswith(f"disk full: no space left on {small_disk} checking out {sha[:12]}")
    assert after.verdict is Verdict.BAD, after.detail


def test_a_build_that_fills_the_disk_gives_disk_full(tmp_path: Path, small_disk: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    build = f"head -c 3000000 /dev/zero > {small_disk}/build-output"
    with LocalExecutor(str(history.path), workers=1) as executor:
        request = replace(step_request(history, 1, 1, "bash test.sh", tmp_path / "logs"), build_cmd=build)
        full = run_one(executor, request)
    assert (full.verdict, full.error_kind) == (Verdict.ERROR, ErrorKind.DISK_FULL), full.detail
    assert full.detail.startswith(
        "disk full: the command failed with 'No space left on device'; free space, then resume the bisect\n"
    )
