"""A step's test inside its image's interpreter on Ray: ImageTestActor, a short-lived actor that Ray starts with
the runtime_env `py_executable` of the image venv's python, and RayImageHost, the slot actor's side of it.

The slot's StepActor (base interpreter) prepares the image and holds it; RayImageHost then starts one
ImageTestActor for the step on the slot actor's node (node affinity), asking for no resources: the slot actor
holds the step's CPU and GPUs for its whole life, and the test sees the slot's GPUs through the
CUDA_VISIBLE_DEVICES of the environment the slot made. The actor appends the test's output to the step's log,
judges it and returns the result; then it is killed.

Contracts:
- The image actor is owned by the slot actor: when that one dies (lost, abandoned, closed), Ray kills the image
  actor too, and its reaper (workers/ray_reaper.py) kills the test's process groups.
- A cancel of the step reaches the running test (the actor's control group), also one that comes before the
  actor is up.
- An image actor lost mid-test makes the step an error of kind WORKER_LOST; the slot actor lives on.
- An image whose python cannot run gpu-bisect's runner under this Ray (no `ray` or gpu-bisect's modules there, or
  another Ray or Python version; probed once per image and slot, as Ray would wait for such a worker for ever)
  runs its test from the slot actor as without Ray, with a note in the log saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
from ray import exceptions as ray_errors
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.workers.image_test import ImageTest
from bisector.workers.output import StepLog
from bisector.workers.process import KILL_GRACE_S, CancelSignal
from bisector.workers.ray_cluster import CONTROL_GROUP, one_line
from bisector.workers.ray_reaper import Reaper
from bisector.workers.step import StepRunner, WorkerSlot

PROBE_TIMEOUT_S = 120.0  # importing Ray in a cold image on a busy node
START_ALLOWANCE_S = 120.0  # beyond the step's time left, for Ray to start the actor before its test can run
_PROBE_SOURCE = (
    "import json, sys, ray, bisector.workers.ray_image_host; "
    "print(json.dumps({'ray': ray.__version__, 'python': list(sys.version_info[:2])}))"
)


class ImageTestActor:
    """Runs one step's test; Ray starts it with the image's python (created through ray.remote by RayImageHost)."""

    def __init__(self, slot: WorkerSlot) -> None:
        self._runner = StepRunner(slot)
        self._reaper = Reaper()
        self._wake = CancelSignal()  # never cleared: the actor serves one step

    def cancel(self) -> None:
        """From the control group, while run executes or before it starts."""
        self._wake.set()

    def run(self, test: ImageTest) -> StepResult:
        groups: list[int] = []

        def started(pgid: int) -> None:
            groups.append(pgid)
            self._reaper.started(pgid)

        try:
            return self._runner.run_image_test(
                test, should_cancel=self._wake.is_set, on_start=started, cancel_fd=self._wake.fileno()
            )
        finally:
            for pgid in groups:
                self._reaper.ended(pgid)


class RayImageHost:
    """The ImageTestHost of a slot actor (workers/image_test.py): runs each step's test in an ImageTestActor."""

    def __init__(self, slot: WorkerSlot, node_id: str) -> None:
        self._slot = slot
        threaded = ray.remote(concurrency_groups={CONTROL_GROUP: 1})  # type: ignore[call-overload]
        self._actor_class = threaded(ImageTestActor)
        self._placement = NodeAffinitySchedulingStrategy(node_id, soft=False)
        self._unusable: dict[tuple[str, str], str] = {}  # (image, built at) -> why its python cannot run the runner
        self._lock = threading.Lock()
        self._actor: Any | None = None  # ActorHandle of the running step's ImageTestActor

    def cancel(self) -> None:
        """Forward a cancel to the running test, if any (the caller's should_cancel already says yes)."""
        with self._lock:
            actor = self._actor
        if actor is not None:
            actor.cancel.options(concurrency_group=CONTROL_GROUP).remote()

    def __call__(self, test: ImageTest, log: StepLog, should_cancel: Callable[[], bool]) -> StepResult | None:
        why = self._cannot_run(test)
        if why:
            log.note(f"# the image's python cannot host the step's runner under Ray ({why}): the slot runs it\n")
            return None
        actor = self._actor_class.options(
            runtime_env={"py_executable": test.python},
            num_cpus=0,
            num_gpus=0,
            scheduling_strategy=self._placement,
            max_restarts=0,  # a lost test comes back as lost, never re-run behind the coordinator's back
            max_task_retries=0,
        ).remote(self._slot)
        with self._lock:
            self._actor = actor
        try:
            if should_cancel():  # a cancel that came before the actor was known here
                self.cancel()
            ref = actor.run.remote(test)
            time_left_s = test.request.timeout_s - (time.monotonic() - test.started)
            try:
                return ray.get(ref, timeout=max(time_left_s, 0) + KILL_GRACE_S + START_ALLOWANCE_S)  # type: ignore[no-any-return]
            except ray_errors.GetTimeoutError:
                return self._error(test, ErrorKind.TIMEOUT, "the image's runner did not start or answer in time")
            except ray_errors.RayTaskError as exc:
                return self._error(test, ErrorKind.HARNESS, f"the image's runner failed: {one_line(exc, last=True)}")
            except ray_errors.RayError as exc:
                if should_cancel():
                    return self._error(test, None, "cancelled; the image's runner was lost meanwhile")
                return self._error(
                    test, ErrorKind.WORKER_LOST, f"the image's runner was lost mid-step: {one_line(exc)}"
                )
        finally:
            with self._lock:
                self._actor = None
            ray.kill(actor, no_restart=True)

    def _cannot_run(self, test: ImageTest) -> str:
        """Why the image's python cannot host an ImageTestActor here ("" when it can), asked once per image (each
        test's python is in its own copy of the image's venv)."""
        wanted = (test.image.id, test.image.created) if test.image is not None else (test.python, "")
        if wanted not in self._unusable:
            self._unusable[wanted] = probe_python(test.python)
        return self._unusable[wanted]

    def _error(self, test: ImageTest, kind: ErrorKind | None, detail: str) -> StepResult:
        return StepResult(
            step_id=test.request.step_id, sha=test.request.sha,
            verdict=Verdict.ERROR if kind is not None else Verdict.CANCELLED, error_kind=kind, detail=detail,
            build_s=test.build_s, image=test.image, log_path=test.request.log_path,
            worker=self._slot.name, node=self._slot.node, gpus=self._slot.gpus,
        )  # fmt: skip


def probe_python(python: str) -> str:
    """ "" when python imports this Ray and gpu-bisect's runner as this process does, else why not (one line)."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE_SOURCE], env=dict(os.environ), capture_output=True, text=True,
            timeout=PROBE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return " ".join(str(exc).split())[:300]
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return lines[-1][:300] if lines else f"exit {done.returncode}"
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"unexpected answer {done.stdout[-200:]!r}"
    here = {"ray": ray.__version__, "python": list(sys.version_info[:2])}
    if found != here:
        return f"it has Ray {found.get('ray')} on Python {found.get('python')}, the slot Ray {here['ray']}"
    return ""
