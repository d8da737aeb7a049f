"""A container build cancelled or timed out mid-RUN: its RUN step (which podman runs in a session and a cgroup of
its own) is killed with it, and podman, left to wind down, removes its working container. Real podman."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from bisect_helpers import wait_for
from endless_build import endless_build

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.workers.local import LocalExecutor

pytestmark = pytest.mark.containers

STOPPED_WITHIN_S = 120  # a safety bound: the old behaviour ran the RUN step forever


@pytest.mark.parametrize("stop", ["cancel", "timeout"])
def test_a_build_stopped_mid_run_leaves_no_run_step_and_no_working_container(podman: str, tmp_path: Path, stop: str):
    with endless_build(tmp_path / "repo") as build:
        request = build.request(podman, tmp_path / "step.log", timeout_s=20.0 if stop == "timeout" else 600.0)
        results: list[StepResult] = []
        with LocalExecutor(str(build.repo), workers=1) as executor:
            executor.submit(request)
            wait_for(lambda: bool(build.running()), what="the build's RUN step to run")
            if stop == "cancel":
                executor.cancel(1)
            deadline = time.monotonic() + 600
            while not results and time.monotonic() < deadline:
                results += executor.poll(0.5)
        (result,) = results
        expected = (Verdict.CANCELLED, None) if stop == "cancel" else (Verdict.ERROR, ErrorKind.TIMEOUT)
        assert (result.verdict, result.error_kind) == expected, result.detail
        wait_for(lambda: not build.running(), STOPPED_WITHIN_S, "the RUN step to end with its build")
        wait_for(lambda: not build.working_containers(), STOPPED_WITHIN_S, "podman to remove its working container")
