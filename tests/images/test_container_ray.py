"""--image-template on Ray: each slot's actor runs the step's test in the commit's container image on its node, as
the local worker does (the engine's own `run`, not Ray's image_uri, which needs Ray and the cluster's Python inside
every image). Real podman, a real local Ray cluster, a real bisect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisect_helpers import run_cli
from container_repo import METRIC, RUN, container_repo, podman_cmd

from bisector.workers.container_engine import STEP_LABEL

pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.containers, pytest.mark.xdist_group("ray")]  # one Ray cluster at a time


def test_a_ray_bisect_runs_each_step_in_its_commits_container_image(podman: str, tmp_path: Path):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10, 10, 10, 5, 5, 5))
    done = run_cli("start", "--repo", str(repo), "--good", shas[0], "--bad", "main", "--run", RUN, *METRIC,
                   "--image-template", podman, "--env", "TAG=ray", "--executor", "ray", "--workers", "2",
                   "--format", "json", db=tmp_path / "b.db", timeout_s=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == shas[3]
    tested = [step for step in report["steps"] if step["verdict"] in ("good", "bad")]
    assert tested
    assert all(step["worker"].startswith("ray-") for step in tested)
    assert all(step["image"]["source"] in ("built", "cache") for step in tested)
    culprit = next(step for step in tested if step["sha"] == shas[3])
    log = Path(culprit["log_path"]).read_text()
    assert "podman build" in log or culprit["image"]["source"] == "cache"
    assert "in /bisect/worktree tag=ray value=5" in log  # the worktree mounted, the spec's env passed, in the image
    assert "podman run" in report["reproduce"]
    listed = podman_cmd("ps", "-a", "--filter", f"label={STEP_LABEL}", "--format", "{{.Image}}").stdout.split()
    assert [image for image in listed if image.startswith(podman.partition(":")[0] + ":")] == []
