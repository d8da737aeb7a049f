"""--image-template builds: one image wanted by several steps at once is built once, a crashed builder's lock is
taken over, a failed build is remembered (and `bisect images` lists, removes and prunes its record), and the
report's reproduce line is the engine's command that ran the test. Real podman; each build appends a line to a
file mounted into it (container_repo.BUILD), so the tests count builds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from bisect_helpers import run_cli, wait_for
from container_repo import METRIC, RUN, container_repo, podman_cmd

from bisector.report.model import reproduce_command
from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.vocab.metric import Expectation, MetricSpec
from bisector.workers.container_engine import built_reference
from bisector.workers.container_image import container_record_id
from bisector.workers.executor import StepRequest
from bisector.workers.images.cache import ImageCache, LockTimeoutError
from bisector.workers.images.key import container_recipe
from bisector.workers.local import LocalExecutor
from bisector.workers.step import StepRunner, WorkerSlot
from bisector.workers.step_request import PLAIN_CONTAINER_RECIPE

pytestmark = pytest.mark.containers

WAITING = "another step is pulling or building it; waiting"


@pytest.fixture
def builds(podman: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file each build appends a line to (a folder mounted at /count in every build)."""
    count = tmp_path / "count"
    count.mkdir()
    monkeypatch.setenv("BISECT_CONTAINER_BUILD_ARGS", f"--layers=false --volume {count}:/count")
    return count / "builds"


def _request(repo: Path, sha: str, template: str, tmp_path: Path, step_id: int) -> StepRequest:
    engine_env = {k: os.environ[k] for k in ("CONTAINERS_CONF", "BISECT_CONTAINER_BUILD_ARGS") if k in os.environ}
    return StepRequest(
        step_id=step_id, bisect_id=5, sha=sha, attempt=1, repo=str(repo), run_cmd=RUN, env=engine_env,
        metric=MetricSpec(regex=r"metric: ([0-9.]+)", expect=Expectation.parse(">= 8")),
        log_path=str(tmp_path / f"step-{step_id}.log"), timeout_s=600, container=template.format(short=sha[:12]),
    )  # fmt: skip


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _lines(path: Path) -> list[str]:
    return _text(path).splitlines()


def test_two_steps_wanting_one_image_at_once_build_it_once(podman: str, builds: Path, tmp_path: Path):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10,))
    hold = builds.parent / "hold"
    hold.touch()  # the first build waits while the second step finds the image's lock taken
    results: dict[int, StepResult] = {}
    logs = [tmp_path / f"step-{step_id}.log" for step_id in (1, 2)]

    def step(step_id: int) -> None:
        runner = StepRunner(WorkerSlot(f"w{step_id}", (), tmp_path / f"worktree-{step_id}"))
        results[step_id] = runner.run(_request(repo, shas[0], podman, tmp_path, step_id))

    threads = [threading.Thread(target=step, args=(step_id,)) for step_id in (1, 2)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: any(WAITING in _text(log) for log in logs), what="a step waiting for the other's build")
    finally:
        hold.unlink()
        for thread in threads:
            thread.join()
    assert [results[i].verdict for i in (1, 2)] == [Verdict.GOOD, Verdict.GOOD], [results[i].detail for i in (1, 2)]
    images = [results[i].image for i in (1, 2)]
    assert sorted((i.source, i.reused) for i in images if i is not None) == [("built", False), ("cache", True)]
    assert len({i.id for i in images if i is not None}) == 1
    assert _lines(builds) == ["build at 0"]
    waited = next(i for i, image in zip((1, 2), images, strict=True) if image is not None and image.source == "cache")
    assert WAITING in _text(logs[waited - 1])


def test_a_crashed_builders_lock_is_taken_over(podman: str, builds: Path, tmp_path: Path):
    """A worker killed mid-build (its build's process group reaped by the executor) leaves the lock free."""
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10,))
    request = _request(repo, shas[0], podman, tmp_path, 1)
    assert request.container is not None
    lock_id = container_record_id(built_reference(request.container, request.container_recipe))
    cache = ImageCache()
    hold = builds.parent / "hold"
    hold.touch()
    try:
        with LocalExecutor(str(repo), workers=1) as executor:
            executor.submit(request)
            wait_for(lambda: bool(_lines(builds)), what="the build to start")
            with pytest.raises(LockTimeoutError), cache.lock(lock_id, timeout_s=0):
                pass  # the builder holds it
            executor.abandon(request.step_id)
            lost: list[StepResult] = []
            wait_for(lambda: bool(lost.extend(executor.poll(0.2)) or lost), what="the lost step's result")
    finally:
        hold.unlink()  # the killed build's RUN, which runs on in the engine's container, ends
    assert lost[0].error_kind is ErrorKind.WORKER_LOST
    rebuilt = StepRunner(WorkerSlot("w2", (), tmp_path / "worktree-2")).run(
        _request(repo, shas[0], podman, tmp_path, 2)
    )
    assert rebuilt.verdict is Verdict.GOOD, rebuilt.detail
    assert rebuilt.image is not None
    assert (rebuilt.image.source, rebuilt.image.reused) == ("built", False)
    assert _lines(builds) == ["build at 0", "build at 0"]


def test_a_failed_build_is_remembered_until_images_rm_or_prune(podman: str, builds: Path, tmp_path: Path):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10, 10), broken=1)
    reference = built_reference(podman.format(short=shas[1][:12]), PLAIN_CONTAINER_RECIPE)  # gpu-bisect's build
    record = container_record_id(reference)
    db = tmp_path / "b.db"

    def run_at() -> dict[str, object]:
        done = run_cli("run-at", shas[1], "--repo", str(repo), "--run", RUN, *METRIC, "--image-template", podman,
                       "--format", "json", db=db)  # fmt: skip
        assert done.returncode == 3, done.stderr
        answer: dict[str, object] = json.loads(done.stdout)
        return answer

    def listed() -> list[tuple[str, str, str]]:
        done = run_cli("images", "ls", "--format", "json", db=db)
        assert done.returncode == 0, done.stderr
        return [(i["id"], i["status"], i["path"]) for i in json.loads(done.stdout)]

    first, second = run_at(), run_at()
    assert _lines(builds) == ["build at 1"]  # the second run did not build
    assert (first["verdict"], first["image"]["source"]) == ("skip", "built")
    assert "container image build failed (exit 3)" in first["runs"][0]["detail"]
    assert (second["verdict"], second["image"]["source"], second["image"]["id"]) == ("skip", "cache", record)
    detail = second["runs"][0]["detail"]
    assert f"container image {reference} failed to build at {shas[1][:12]}" in detail
    assert f"`bisect images rm {record}` to build it again" in detail
    assert "error: the stack does not build" in detail  # the stored log tail
    assert listed() == [(record, "failed", reference)]

    removed = run_cli("images", "rm", record, db=db)
    assert (removed.returncode, removed.stdout.strip()) == (0, f"removed {record}"), removed.stderr
    assert listed() == []
    third = run_at()
    assert third["image"]["source"] == "built"
    assert _lines(builds) == ["build at 1", "build at 1"]
    assert listed() == [(record, "failed", reference)]

    pruned = run_cli("images", "prune", "--older-than", "0s", db=db)
    assert (pruned.returncode, pruned.stdout.strip()) == (0, f"removed 1 image(s): {record}"), pruned.stderr
    assert listed() == []
    run_at()
    assert len(_lines(builds)) == 3


def test_the_reproduce_line_is_the_engine_command_and_runs(podman: str, tmp_path: Path):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10, 5))
    done = run_cli("start", "--repo", str(repo), "--good", shas[0], "--bad", shas[1], "--run", RUN, *METRIC,
                   "--image-template", podman, "--env", "TAG=it's $x", "--format", "json",
                   db=tmp_path / "b.db")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == shas[1]
    line = report["reproduce"]
    workdir = f"/tmp/bisect-repro-{shas[1][:12]}"
    reference = built_reference(podman.format(short=shas[1][:12]), container_recipe(None, (), {"TAG": "it's $x"}))
    run_part = line.split(" && ")[-1]
    assert run_part.startswith("TAG='it'\"'\"'s $x' podman run --rm ")
    assert f" -v {workdir}:/bisect/worktree -w /bisect/worktree -e TAG {reference} sh -c " in run_part
    try:
        ran = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=300, check=False)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines()[-2:] == ["metric: 5", "in /bisect/worktree tag=it's $x value=5"]
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", workdir], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
    assert podman_cmd("ps", "-a", "--filter", f"ancestor={reference}", "--format", "{{.Names}}").stdout.strip() == ""


def test_the_reproduce_line_passes_the_steps_gpus_as_the_step_did(monkeypatch: pytest.MonkeyPatch):
    """No podman needed: the line only."""
    monkeypatch.setenv("BISECT_CONTAINER_RUN_ARGS", "--security-opt label=disable")
    line = reproduce_command("/r", "a" * 40, None, "python t.py", {"TAG": "x"}, (0, 3), "reg/stack:aaaa")
    workdir = f"/tmp/bisect-repro-{'a' * 12}"
    assert line.split(" && ")[-1] == (
        f"TAG=x podman run --rm --security-opt label=disable -v {workdir}:/bisect/worktree -w /bisect/worktree "
        "-e TAG --device nvidia.com/gpu=0 --device nvidia.com/gpu=3 reg/stack:aaaa sh -c 'python t.py'"
    )
    on_host = reproduce_command("/r", "a" * 40, "make", "python t.py", {"TAG": "x"}, (0, 3))
    assert on_host.split(" && ")[-2:] == [
        "CUDA_VISIBLE_DEVICES=0,3 TAG=x bash -c make",
        "CUDA_VISIBLE_DEVICES=0,3 TAG=x bash -c 'python t.py'",
    ]
