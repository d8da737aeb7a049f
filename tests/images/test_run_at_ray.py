"""`bisect run-at --executor ray`: an ad hoc run on a local Ray cluster builds the commit's image once, runs on
it, and a second run at the same commit reuses it (the same JSON as the local executor's)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bisect_helpers import stored_rows
from image_repo import make_image_repo, run_at

pytest.importorskip("ray")

pytestmark = [
    pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)"),
    pytest.mark.ray,
    pytest.mark.xdist_group("ray"),  # one local Ray cluster at a time
]


def run_at_on_ray(repo: Path, rev: str, db: Path) -> dict[str, object]:
    answer = run_at(repo, rev, db, "--executor", "ray")
    assert answer["verdict"] != "error", answer
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
