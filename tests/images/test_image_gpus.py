"""An image is the same whoever built it: every build of a host sees the host's GPUs (a build ahead as a step's own
build), and the image key names their architectures, so that no host runs an image built for other GPUs. GPUs are
those of a stand-in nvidia-smi (tests/images/nvidia_smi_standin.py) on $PATH."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from bisect_helpers import run_cli
from image_repo import BUILD_CMD, make_image_repo, run_at
from nvidia_smi_standin import H100, nvidia_smi_standin

pytestmark = pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)")

# What each build saw, a line per build: its commit, who built it, its CUDA_VISIBLE_DEVICES.
RECORD_BUILD = 'echo "$BISECT_SHA $BISECT_WORKER [${{CUDA_VISIBLE_DEVICES-unset}}]" >> {record}; ' + BUILD_CMD


def on_host(monkeypatch: pytest.MonkeyPatch, standin: Path, gpus: Sequence[tuple[str, str]]) -> None:
    """Later `bisect` commands run on a host with gpus (nvidia-smi's, nothing declaring them otherwise)."""
    monkeypatch.delenv("BISECT_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", f"{nvidia_smi_standin(standin, gpus)}{os.pathsep}{os.environ['PATH']}")


def image_at(repo: Path, sha: str, db: Path, *extra: str) -> dict[str, object]:
    """The image `bisect run-at` ran sha's test on."""
    image = run_at(repo, sha, db, *extra)["image"]
    assert isinstance(image, dict), image
    return image


def test_a_build_ahead_and_a_steps_own_build_see_the_hosts_gpus_and_give_one_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    repo = make_image_repo(tmp_path / "repo", (10,) * 5 + (5,) * 3)
    on_host(monkeypatch, tmp_path / "bin", [H100, H100])
    builds, tests = tmp_path / "builds", tmp_path / "tests"
    builds.touch()
    wait_for_a_build_ahead = f'for i in $(seq 1800); do [ "$(wc -l < {builds})" -ge 3 ] && break; sleep 0.1; done'
    done = run_cli(
        "start", "--repo", str(repo.path), "--good", repo.shas[0], "--bad", repo.shas[-1], "--image", "venv",
        "--build", RECORD_BUILD.format(record=builds), "--workers", "1", "--no-explain", "--format", "json",
        "--run", f'{wait_for_a_build_ahead}; echo "[$CUDA_VISIBLE_DEVICES]" >> {tests}; bash test.sh',
        "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", db=tmp_path / "b.db",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["first_bad"]["sha"] == repo.shas[5]
    seen = [line.split() for line in builds.read_text().splitlines()]
    ahead = {sha for sha, worker, _ in seen if worker == "build-ahead"}
    assert ahead, seen
    assert len(ahead) < len(seen), seen  # the first probe's step built its own image
    assert {gpus for _, _, gpus in seen} == {"[0,1]"}  # the host's GPUs, whoever built
    assert set(tests.read_text().splitlines()) == {"[0]"}  # a test sees its own slot's GPU alone

    # the image a step builds itself at a commit built ahead is the one built ahead
    images = json.loads(run_cli("images", "ls", "--format", "json", db=tmp_path / "b.db").stdout)
    built_ahead = next(image for image in images if image["sha"] in ahead)
    assert run_cli("images", "rm", built_ahead["id"], db=tmp_path / "b.db").returncode == 0
    again = image_at(repo.path, built_ahead["sha"], tmp_path / "b.db", "--build", RECORD_BUILD.format(record=builds))
    assert (again["id"], again["source"]) == (built_ahead["id"], "built")
    sha, worker, gpus = builds.read_text().splitlines()[-1].split()
    assert (sha, gpus) == (built_ahead["sha"], "[0,1]")
    assert worker != "build-ahead"
