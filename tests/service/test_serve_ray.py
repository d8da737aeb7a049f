"""`bisect serve --executor ray`: the service's shared slots are a local Ray cluster's. Two jobs submitted at once
run to the end on the Ray slots with the right culprits, and stopping the server ends the cluster it started."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from service_process import running_service, service_home
from synthetic import culprit_history

pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray")]  # one local Ray cluster at a time

RAY_EXIT_TIMEOUT_S = 60.0  # a safety net, never a speed target
CONFIG = """
[recipes.synthetic]
run = "bash test.sh"
"""


def raylets() -> set[int]:
    found = subprocess.run(["pgrep", "-f", "ray/core/src/ray/raylet/raylet"], capture_output=True, text=True)
    return {int(pid) for pid in found.stdout.split()}


def test_two_jobs_run_on_the_ray_slots_and_the_cluster_ends_with_the_server(tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 16, 11, sleep_s=0.05)
    home = tmp_path / "home"
    home.mkdir()
    (home / "serve.toml").write_text(CONFIG)
    env = service_home(home)
    args = ["--db", str(home / "bisect.db"), "--allow-repo", str(history.path), "--config", str(home / "serve.toml"),
            "--slots", "2", "--executor", "ray"]  # fmt: skip
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "synthetic", "explain": False}
    before = raylets()
    with running_service(*args, **env) as service:
        assert raylets() - before, "the server started no Ray cluster"
        with ThreadPoolExecutor(2) as threads:
            answers = list(threads.map(lambda _: service.post(body), range(2)))
        assert [a.status_code for a in answers] == [201, 201]
        reports = [service.wait_done(a.json()["id"]) for a in answers]
    for report in reports:
        assert report["status"] == "found"
        assert report["first_bad"]["sha"] == history.shas[history.first_bad]
        assert {step["worker"] for step in report["steps"]} <= {"ray-0", "ray-1"}
    deadline = time.monotonic() + RAY_EXIT_TIMEOUT_S  # the raylet may take a moment to exit after the server
    while raylets() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not raylets() - before, "the server's Ray cluster outlived it"
