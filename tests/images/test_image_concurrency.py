"""Several workers wanting one image: built once; a builder killed mid-build leaves nothing that blocks a rebuild."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from bisect_helpers import wait_for
from image_repo import image_request, make_image_repo

from bisector.vocab.domain import Verdict
from bisector.workers.images.cache import ImageCache, ImageStatus, LockTimeoutError
from bisector.workers.images.key import ImageRecipe, image_key
from bisector.workers.step import StepRunner, WorkerSlot

pytestmark = pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def start_worker(repo: Path, sha: str, tmp: Path, step_id: int, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "want_image.py"), str(repo), sha, str(tmp), str(step_id)],
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}", **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def test_two_workers_wanting_one_image_at_once_build_it_once(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    counter = tmp_path / "builds"
    env = {"BUILD_COUNTER": str(counter), "BUILD_SLEEP_S": "1"}
    workers = [start_worker(repo.path, repo.shas[0], tmp_path, step, **env) for step in (1, 2)]
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err
        results.append(json.loads(out))
    assert [r["verdict"] for r in results] == ["good", "good"]
    images = sorted((r["image"]["source"], r["image"]["reused"]) for r in results)
    assert images == [("built", False), ("cache", True)]
    assert len({r["image"]["id"] for r in results}) == 1
    assert counter.read_text().splitlines() == ["build at 0"]


def test_a_builder_killed_mid_build_is_rebuilt_by_the_next_one(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    counter = tmp_path / "builds"
    request = image_request(repo.path, repo.shas[0], tmp_path)
    assert request.image is not None
    image_id = image_key(str(repo.path), repo.shas[0], request.build_cmd, request.image).id
    cache = ImageCache()
    worker = start_worker(repo.path, repo.shas[0], tmp_path, 1, BUILD_COUNTER=str(counter), BUILD_SLEEP_S="300")
    try:
        wait_for(lambda: counter.exists(), what="the build to start")
        manifest = cache.manifest(image_id)
        assert manifest is not None
        assert manifest.status is ImageStatus.BUILDING
        with pytest.raises(LockTimeoutError), cache.lock(image_id, timeout_s=0):
            pass  # the builder holds it
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.communicate()

    rebuilt = StepRunner(WorkerSlot("w2", (), tmp_path / "wt2")).run(
        image_request(repo.path, repo.shas[0], tmp_path, 2, BUILD_COUNTER=str(counter))
    )
    assert rebuilt.verdict is Verdict.GOOD, rebuilt.detail
    assert rebuilt.image is not None
    assert (rebuilt.image.id, rebuilt.image.source, rebuilt.image.reused) == (image_id, "built", False)
    assert counter.read_text().splitlines() == ["build at 0", "build at 0"]


def test_a_failed_recipe_is_refused_before_anything_runs(tmp_path: Path):
    with pytest.raises(Exception, match="image must be one of"):
        ImageRecipe("docker")
    with pytest.raises(Exception, match="inside the repository"):
        ImageRecipe("venv", ("../outside",))
