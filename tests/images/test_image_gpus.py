"""An image is the same whoever built it: every build of a host sees the host's GPUs (a build ahead as a step's own
build), and the image key names their architectures, so that no host runs an image built for other GPUs. GPUs are
those of a stand-in nvidia-smi (tests/images/nvidia_smi_standin.py) on $PATH."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from bisect_helpers import run_cli
from image_repo import BUILD_CMD, git, make_image_repo, run_at
from nvidia_smi_standin import A100, B200, H100, nvidia_smi_standin

from bisector.workers.images.cache import images_root
from bisector.workers.images.key import base_environment

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


def key_of(image_id: object) -> dict[str, object]:
    key: dict[str, object] = json.loads((images_root() / str(image_id) / "manifest.json").read_text())["key"]
    return key


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


def test_an_image_built_on_one_gpu_architecture_is_not_reused_on_another_but_is_on_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """One image store (this test's cache root) shared by three hosts."""
    repo = make_image_repo(tmp_path / "repo", (10,))
    made = {}
    for host, gpus in (("h100", [H100]), ("a100", [A100]), ("another-h100", [H100])):
        on_host(monkeypatch, tmp_path / host, gpus)
        made[host] = image_at(repo.path, repo.shas[0], tmp_path / "b.db")
    assert [image["source"] for image in made.values()] == ["built", "built", "cache"]
    assert made["h100"]["id"] == made["another-h100"]["id"] != made["a100"]["id"]
    assert key_of(made["a100"]["id"])["base_env"] == {**base_environment(), "gpu_arch": "8.0"}


def test_a_host_without_gpus_keeps_the_key_it_had_and_a_host_with_gpus_names_their_architectures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    repo = make_image_repo(tmp_path / "repo", (10,))
    git(repo.path, "remote", "add", "origin", "https://example.org/stack.git")  # the key names the repo by its URL
    on_host(monkeypatch, tmp_path / "no-gpu", [])
    no_gpu = image_at(repo.path, repo.shas[0], tmp_path / "b.db")
    # the key this build had before keys named GPUs: its fields, hashed as ImageKey.id hashes them
    before = {"repo": "https://example.org/stack.git", "inputs_tree": "a3aef7643d0a575624e6f8536db394cb20702093",
              "recipe": "fa44de2a8eeb6d39", "base_env": base_environment()}  # fmt: skip
    assert no_gpu["id"] == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:16]
    assert key_of(no_gpu["id"]) == before

    on_host(monkeypatch, tmp_path / "mixed", [B200, A100, B200])  # sorted as numbers, each once
    mixed = image_at(repo.path, repo.shas[0], tmp_path / "b.db")
    assert mixed["id"] != no_gpu["id"]
    assert key_of(mixed["id"]) == {**before, "base_env": {**base_environment(), "gpu_arch": "8.0,10.0"}}
