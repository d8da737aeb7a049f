"""`bisect run-at --executor ray`: an ad hoc run on a local Ray cluster builds the commit's image once, runs on
it, and a second run at the same commit reuses it (the same JSON as the local executor's)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bisect_helpers import run_cli, stored_rows
from image_repo import BUILD_CMD, RUN_CMD, make_image_repo

pytest.importorskip("ray")

pytestmark = [
    pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)"),
    pytest.mark.ray,
    pytest.mark.xdist_group("ray"),  # one local Ray cluster at a time
]


def run_at_on_ray(repo: Path, rev: str, db: Path) -> dict[str, object]:
    done = run_cli("run-at", rev, "--repo", str(repo), "--build", BUILD_CMD, "--run", RUN_CMD,
                   "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", "--executor", "ray", "--format", "json",
                   db=db)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_run_at_on_ray_builds_the_image_once_and_reuses_it(tmp_path: Path) -> None:
    repo = make_image_repo(tmp_path / "repo")
    db = tmp_path / "bisect.db"
    first = run_at_on_ray(repo.path, repo.shas[0], db)
    assert (first["sha"], first["verdict"], first["metric"]) == (repo.shas[0], "good", 10.0)
    image = first["image"]
    assert isinstance(image, dict)
    assert (image["source"], image["reused"]) == ("built", False)
    again = run_at_on_ray(repo.path, repo.shas[0], db)
    assert again["image"] == {**image, "source": "cache", "reused": True}
    runs = again["runs"]
    assert isinstance(runs, list)
    assert runs[0]["verdict"] == "good"
    workers = {row[0] for row in stored_rows(db, "SELECT worker FROM steps")}
    assert workers, "no step stored"
    assert all(worker.startswith("ray-") for worker in workers), workers
