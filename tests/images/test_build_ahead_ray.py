"""Images built ahead of their steps on Ray (workers/ray_build_ahead.py): a real `bisect start --executor ray` on a
local Ray cluster, and a real build ahead stopped through its slot's actor."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
from bisect_helpers import processes_with, run_cli, wait_for
from image_repo import make_image_repo
from test_build_ahead import _manifests, _request, _start_args

from bisector.workers.build_ahead import AheadStatus
from bisector.workers.images.cache import ImageStatus

pytest.importorskip("ray")

from bisector.runner.stopping import StopRequested
from bisector.workers.pool import SlotPool
from bisector.workers.ray_build_ahead import RayBuildAhead
from bisector.workers.ray_executor import RayExecutor

pytestmark = [
    pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)"),
    pytest.mark.ray,
    pytest.mark.xdist_group("ray"),  # one local Ray cluster at a time
]


def test_a_bisect_on_ray_tests_its_next_probes_on_images_its_slot_built_while_the_probe_before_ran(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", (10,) * 11 + (5,) * 5)
    counter = tmp_path / "builds"
    done = run_cli(*_start_args(repo, counter), "--executor", "ray", "--format", "json", db=tmp_path / "b.db")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == repo.shas[11]
    steps = report["steps"]
    assert all(s["worker"].startswith("ray-") for s in steps)
    tested_on_ready_images = [s for s in steps if s["image"]["source"] == "cache"]
    assert tested_on_ready_images, steps  # built ahead by the slot's actor while its step ran
    built = [line.split()[-1] for line in counter.read_text().splitlines()]
    assert len(built) == len(set(built))  # each commit built once, ahead or by its step
    ahead = report["built_ahead"]
    assert {s["sha"] for s in tested_on_ready_images} <= set(ahead)
    assert repo.shas[0] not in ahead
    assert set(_manifests().values()) <= {ImageStatus.READY.value}  # the stopped ones left nothing half built


def test_a_build_ahead_on_a_ray_slot_that_the_search_no_longer_needs_is_stopped_and_leaves_no_image(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", (10, 10))
    with RayExecutor(str(repo.path), 1) as executor:
        ahead = executor.ahead_builder(1)
        request = _request(repo.path, repo.shas[1], tmp_path, BUILD_SLEEP_S="617")
        wait_for(lambda: bool(executor.free_workers()), what="the slot's actor")
        ahead.want([request], lambda sha: True)
        wait_for(lambda: bool(processes_with("sleep 617")), what="the build's sleep on the slot's node")
        ahead.want([], lambda sha: False)  # the search moved on: its commit is out of the range
        wait_for(lambda: bool(ahead.reap()) or not ahead.running, what="the stopped build to end")
        assert [o.status for o in ahead.outcomes.values()] == [AheadStatus.CANCELLED]
        assert not processes_with("sleep 617")
        assert ImageStatus.READY.value not in _manifests().values()


def test_a_service_pools_ray_slots_and_its_bisects_build_ahead_on_them(tmp_path: Path):
    """`bisect serve --executor ray`: each bisect's executor is a view of the pool's RayExecutor, and its builds
    ahead go to the pool's Ray slots (not to the service's host), the slots read under the pool's lock."""
    repo = make_image_repo(tmp_path / "repo", (10, 10))
    counter = tmp_path / "builds"
    executor = RayExecutor(str(repo.path), 1)
    pool = SlotPool(executor, stop_error=lambda: StopRequested(signal.SIGTERM))
    try:
        ahead = pool.view(1).ahead_builder(1)
        assert isinstance(ahead, RayBuildAhead)
        # (not through a second view: with more views than slots, one promised none waits for a slot)
        wait_for(lambda: bool(executor.free_workers()), what="the slot's actor")
        ahead.want([_request(repo.path, repo.shas[1], tmp_path, BUILD_COUNTER=str(counter))], lambda sha: True)
        (running,) = ahead.running.values()
        assert running.worker.startswith("ray-")
        wait_for(lambda: bool(ahead.reap()), what="the build ahead")
        assert [o.status for o in ahead.outcomes.values()] == [AheadStatus.READY]
        assert counter.read_text().splitlines() == ["build at 1"]
    finally:
        pool.close()
