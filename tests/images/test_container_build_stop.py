"""A container build cancelled or timed out mid-RUN: its RUN step (which podman runs in a session and a cgroup of
its own) is killed with it, and podman, left to wind down, removes its working container. Real podman."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from bisect_helpers import wait_for
from container_repo import BASE, podman_cmd
from image_repo import commit, init_repo

from vocab.domain import ErrorKind, StepResult, Verdict
from vocab.metric import MetricSpec
from workers.executor import StepRequest
from workers.local import LocalExecutor

STOPPED_WITHIN_S = 120  # a safety bound: the old behaviour ran the RUN step forever


def _running_with(token: str) -> list[int]:
    """Live processes whose command line holds token."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if state != "Z":
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _working_containers(base: str) -> list[str]:
    names = podman_cmd("ps", "--external", "--all", "--format", "{{.Names}}", check=False).stdout.split()
    return [name for name in names if name.startswith(base.rsplit("/", 1)[-1] + "-working-container")]


@pytest.mark.parametrize("stop", ["cancel", "timeout"])
def test_a_build_stopped_mid_run_leaves_no_run_step_and_no_working_container(podman: str, tmp_path: Path, stop: str):
    token = f"bisect-build-{uuid.uuid4().hex[:12]}"
    base = f"localhost/{token}-base"  # its working containers are named after it: this test's alone
    podman_cmd("tag", BASE, base)
    try:
        repo = tmp_path / "repo"
        init_repo(repo)
        containerfile = f"FROM {base}\nRUN echo {token} && while true; do sleep 1; done\n"
        sha = commit(repo, "a build that never ends", {"Containerfile": containerfile})
        engine_env = {k: os.environ[k] for k in ("CONTAINERS_CONF", "BISECT_CONTAINER_BUILD_ARGS") if k in os.environ}
        request = StepRequest(
            step_id=1, bisect_id=1, sha=sha, attempt=1, repo=str(repo), run_cmd="true", env=engine_env,
            metric=MetricSpec(), log_path=str(tmp_path / "step.log"), container=podman.format(short=sha[:12]),
            timeout_s=20.0 if stop == "timeout" else 600.0,
        )  # fmt: skip
        results: list[StepResult] = []
        with LocalExecutor(str(repo), workers=1) as executor:
            executor.submit(request)
            wait_for(lambda: bool(_running_with(token)), what="the build's RUN step to run")
            if stop == "cancel":
                executor.cancel(1)
            deadline = time.monotonic() + 600
            while not results and time.monotonic() < deadline:
                results += executor.poll(0.5)
        (result,) = results
        expected = (Verdict.CANCELLED, None) if stop == "cancel" else (Verdict.ERROR, ErrorKind.TIMEOUT)
        assert (result.verdict, result.error_kind) == expected, result.detail
        wait_for(lambda: not _running_with(token), STOPPED_WITHIN_S, "the RUN step to end with its build")
        wait_for(lambda: not _working_containers(base), STOPPED_WITHIN_S, "podman to remove its working container")
    finally:
        for pid in _running_with(token):
            os.kill(pid, 9)
        for name in _working_containers(base):
            podman_cmd("rm", "--force", name, check=False)
        podman_cmd("rmi", "--force", base, check=False)
