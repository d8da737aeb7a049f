"""--image-template: each step runs in its commit's container image, used where the engine has it, else built from
the commit's Containerfile. Real podman, real images (made offline from Debian's busybox-static), real bisects.

Passing GPUs into a container (CDI's nvidia.com/gpu=N, NVIDIA_VISIBLE_DEVICES) cannot be tested here: no GPU."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from bisect_helpers import run_cli, wait_for
from container_repo import BASE, METRIC, RUN, container_repo, podman_cmd
from image_repo import commit, init_repo

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.vocab.metric import Expectation, MetricSpec
from bisector.workers.container_engine import STEP_LABEL, built_reference
from bisector.workers.container_image import container_record_id
from bisector.workers.executor import StepRequest
from bisector.workers.images.cache import ImageCache
from bisector.workers.local import LocalExecutor
from bisector.workers.step import StepRunner, WorkerSlot
from bisector.workers.step_request import PLAIN_CONTAINER_RECIPE

pytestmark = pytest.mark.containers


def _prebuilt(template: str, sha: str, value: int, into: Path) -> str:
    """An image as a CI job would publish it for sha (not by gpu-bisect): its id."""
    context = into / f"ctx-{sha[:12]}"
    context.mkdir()
    (context / "Containerfile").write_text(f"FROM {BASE}\nRUN mkdir /stack && echo {value} > /stack/built\n")
    reference = template.format(short=sha[:12])
    podman_cmd("build", "-q", "-t", reference, str(context))
    return podman_cmd("image", "inspect", "--format", "{{.Id}}", reference).stdout.strip()


def test_a_bisect_uses_the_images_that_exist_and_builds_the_others(podman: str, tmp_path: Path):
    repo = tmp_path / "repo"
    values = (10, 10, 10, 5, 5, 5)
    shas = container_repo(repo, values)
    prebuilt = {shas[i]: _prebuilt(podman, shas[i], values[i], tmp_path) for i in (0, 2, 5)}
    done = run_cli("start", "--repo", str(repo), "--good", shas[0], "--bad", "main", "--run", RUN, *METRIC,
                   "--image-template", podman, "--env", "TAG=t1", "--format", "json", db=tmp_path / "b.db")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == shas[3]
    tested = [step for step in report["steps"] if step["verdict"] in ("good", "bad")]
    by_sha = {step["sha"]: step for step in tested}
    assert {shas[2], shas[3]} <= set(by_sha)  # the culprit and its parent were tested
    for step in tested:
        image = step["image"]
        if step["sha"] in prebuilt:  # used as it is, not built
            assert (image["source"], image["reused"]) == ("artifact", True)
            assert image["id"] == prebuilt[step["sha"]][:16]
        else:
            assert image["source"] in ("built", "cache")
    assert by_sha[shas[3]]["image"]["source"] == "built"
    prebuilt_log = Path(by_sha[shas[2]]["log_path"]).read_text()
    assert "podman build" not in prebuilt_log
    built_log = Path(by_sha[shas[3]]["log_path"]).read_text()
    assert "podman build" in built_log
    assert "in /bisect/worktree tag=t1 value=5" in built_log  # the worktree mounted, the spec's env passed
    assert _containers_of(podman) == []


def _containers_of(template: str) -> list[str]:
    """The containers, running or not, of this module's images."""
    listed = podman_cmd("ps", "-a", "--filter", f"label={STEP_LABEL}", "--format", "{{.Names}} {{.Image}}").stdout
    repository = template.partition(":")[0]
    return [line for line in listed.splitlines() if line.split()[-1].startswith(repository + ":")]


def test_an_image_gpu_bisect_built_is_reused_as_cache_and_bisect_toml_names_the_template(podman: str, tmp_path: Path):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10,))

    def run_at(*template: str) -> dict[str, object]:
        done = run_cli("run-at", shas[0], "--repo", str(repo), "--run", RUN, *METRIC, *template,
                       "--format", "json", db=tmp_path / "b.db")  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    first = run_at("--image-template", podman)
    (repo / "bisect.toml").write_text(f'[bisect]\nimage_template = "{podman}"\n')  # the same, from bisect.toml
    second = run_at()
    assert (first["verdict"], first["metric"], first["image"]["source"]) == ("good", 10.0, "built")
    assert (second["image"]["source"], second["image"]["id"]) == ("cache", first["image"]["id"])
    built = built_reference(podman.format(short=shas[0][:12]), PLAIN_CONTAINER_RECIPE)  # tagged with its recipe
    for _ in range(2):  # listing keeps the engine's images (they have no folder in the cache root)
        listed = run_cli("images", "ls", "--format", "json", db=tmp_path / "b.db")
        assert listed.returncode == 0, listed.stderr
        assert [(i["id"], i["path"]) for i in json.loads(listed.stdout)] == [(first["image"]["id"], built)]
    refused = run_cli("images", "rm", str(first["image"]["id"]), db=tmp_path / "b.db")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"bisect: error: {first['image']['id']} is a container image: remove it with the engine "
        f"(e.g. podman rmi {built})"
    ]


def test_a_failed_container_build_skips_the_commit_with_its_log_tail(podman: str, tmp_path: Path):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10, 10), broken=1)
    done = run_cli("run-at", shas[1], "--repo", str(repo), "--run", RUN, *METRIC, "--image-template", podman,
                   "--format", "json", db=tmp_path / "b.db")  # fmt: skip
    assert done.returncode == 3, done.stderr
    run = json.loads(done.stdout)
    assert run["verdict"] == "skip"
    assert run["image"]["source"] == "built"
    assert "container image build failed" in run["runs"][0]["detail"]
    assert "error: the stack does not build" in run["runs"][0]["detail"]
    assert podman_cmd("image", "exists", podman.format(short=shas[1][:12]), check=False).returncode == 1


def test_a_container_build_failing_on_infrastructure_is_an_error_not_a_failed_image(podman: str, tmp_path: Path):
    repo = tmp_path / "repo"
    container_repo(repo, (10,))
    offline = commit(repo, "the build's network is down", {"offline": ""})
    runner = StepRunner(WorkerSlot("w0", (), tmp_path / "worktree"))
    request = replace(_request(repo, offline, podman, tmp_path, 600, step_id=9), run_cmd=RUN)
    result = runner.run(request)
    assert (result.verdict, result.error_kind) == (Verdict.ERROR, ErrorKind.INFRA), result.detail
    assert "Connection refused" in result.detail
    reference = podman.format(short=offline[:12])
    assert ImageCache().manifest(container_record_id(reference)) is None  # no failure record: the next step builds


def _request(repo: Path, sha: str, template: str, tmp_path: Path, timeout_s: float, step_id: int) -> StepRequest:
    """step_id: one per test, so that tests running at once (xdist) never see each other's containers."""
    return StepRequest(
        step_id=step_id, bisect_id=3, sha=sha, attempt=1, repo=str(repo), run_cmd="echo started; sleep 600",
        metric=MetricSpec(regex=r"metric: ([0-9.]+)", expect=Expectation.parse(">= 8")),
        log_path=str(tmp_path / "step.log"), timeout_s=timeout_s, container=template.format(short=sha[:12]),
    )  # fmt: skip


def _step_containers(step_id: int) -> list[str]:
    label = f"label={STEP_LABEL}=3/{step_id}/1"
    return podman_cmd("ps", "-a", "--filter", label, "--format", "{{.Names}}").stdout.split()


def test_cancel_and_timeout_remove_the_container(podman: str, tmp_path: Path):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10,))
    runner = StepRunner(WorkerSlot("w0", (), tmp_path / "worktree"))
    cancel = threading.Event()
    results: list[StepResult] = []
    thread = threading.Thread(
        target=lambda: results.append(runner.run(_request(repo, shas[0], podman, tmp_path, 600, 7), cancel.is_set))
    )
    thread.start()
    wait_for(lambda: bool(_step_containers(7)), what="the step's container")
    cancel.set()
    thread.join()
    assert results[0].verdict is Verdict.CANCELLED
    assert _step_containers(7) == []
    timed_out = runner.run(_request(repo, shas[0], podman, tmp_path, 20, 7))
    assert (timed_out.verdict, timed_out.error_kind) == (Verdict.ERROR, ErrorKind.TIMEOUT)
    assert "started" in (tmp_path / "step.log").read_text()
    assert _step_containers(7) == []


def test_a_worker_killed_mid_step_leaves_no_container(podman: str, tmp_path: Path):
    """The executor reaps a dead worker's process group; the container outlives that, until its guard removes it."""
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10,))
    engine_env = {"CONTAINERS_CONF": os.environ["CONTAINERS_CONF"]} if "CONTAINERS_CONF" in os.environ else {}
    request = replace(_request(repo, shas[0], podman, tmp_path, 600, 8), env=engine_env)  # a forked worker's env
    with LocalExecutor(str(repo), workers=1) as executor:
        executor.submit(request)
        wait_for(lambda: bool(_step_containers(8)), what="the step's container")
        executor.abandon(request.step_id)
        lost: list[StepResult] = []
        wait_for(lambda: bool(lost.extend(executor.poll(0.2)) or lost), what="the lost step's result")
    assert lost[0].error_kind is ErrorKind.WORKER_LOST
    wait_for(lambda: _step_containers(8) == [], what="the container's removal")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--image-template", "r/s:{commit}"], "only {sha} and {short}"),
        (["--image-template", "r/s:{sha}", "--image", "venv"], "leave out --image venv"),
        (["--image-template", "r/s:{sha}", "--build", "make"], "leave out --build"),
    ],
)
def test_an_image_template_that_cannot_work_is_refused(tmp_path: Path, extra: list[str], message: str):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10,))
    done = run_cli("run-at", shas[0], "--repo", str(repo), "--run", RUN, *extra, db=tmp_path / "b.db")
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_an_image_neither_found_nor_buildable_skips_saying_why_never_built(podman: str, tmp_path: Path):
    repo = tmp_path / "repo"
    init_repo(repo)
    sha = commit(repo, "no Containerfile", {"value": "10\n"})
    done = run_cli("run-at", sha, "--repo", str(repo), "--run", "true", "--image-template", podman,
                   db=tmp_path / "b.db")  # fmt: skip
    assert done.returncode == 3, done.stderr
    line = done.stdout.splitlines()[0]
    assert f"{sha[:12]}  skip  on no image (none found, and no Containerfile at the commit to build it)" in line
    assert "built" not in done.stdout
    assert f"no container image {podman.format(short=sha[:12])}, and no Containerfile or Dockerfile" in done.stderr
    as_json = run_cli("run-at", sha, "--repo", str(repo), "--run", "true", "--image-template", podman,
                      "--format", "json", db=tmp_path / "b.db")  # fmt: skip
    image = json.loads(as_json.stdout)["image"]
    assert image["source"] == "missing"
