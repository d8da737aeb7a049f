"""Images of the commits a search will likely probe next, built while the current probes' tests run.

A step on an image first builds it (minutes, on CPUs) and only then tests (on its GPUs). While a round of probes
runs, the commits the search would probe next (a round for each way the running one can come out) are known, so
their images can be built meanwhile; the next step then finds its image ready, or waits for the build already
under way (the image's lock, workers/images/builder.py), instead of building it from the start with its GPUs idle.

Each build runs in a child process of its own session (workers/build_ahead_child.py, in the coordinator's
environment, so it finds the image cache the workers use) that reads its job as one JSON line on stdin. Its stdin
stays open: end of file (the coordinator closed it, or died) cancels the build, which leaves no image. A child
that dies itself, or does not end within STOP_GRACE_S of its stop, is ended here with its session and the process
groups and cgroups its build made (their pgids it printed as they started), as a dead worker's steps are.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

from bisector.vocab.domain import ImageInfo
from bisector.workers.build_slots import slot_count
from bisector.workers.cgroups import end_dead_worker
from bisector.workers.step_request import StepRequest, step_environment

STOP_GRACE_S = 30.0  # a stopped child kills its build (SIGTERM, grace, SIGKILL) and exits within this
PGID_GRACE_S = 5.0  # a dead child's build groups: SIGTERM, then SIGKILL after this
BUILD_WORKER = "build-ahead"  # $BISECT_WORKER of a build ahead (a step's is its worker slot's name)


BuildT = TypeVar("BuildT")  # what a builder keeps of a running build


class AheadStatus(StrEnum):
    READY = "ready"  # built now
    REUSED = "reused"  # it was there already (a step or another bisect made it)
    FAILED = "failed"  # the build failed: nothing kept, the step builds it again (and judges the commit)
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    ERROR = "error"  # the harness could not build it (no process, no folder)
    DIED = "died"  # the child died or would not stop


@dataclass(frozen=True)
class BuildAheadJob:
    """What a child builds: the image a step at sha would prepare (as StepRunner._run_on_image makes its job)."""

    repo: str
    sha: str
    build_cmd: str | None
    mode: str
    inputs: tuple[str, ...]
    max_bytes: int
    artifact: str | None
    env: dict[str, str]
    timeout_s: float
    infra_patterns: tuple[str, ...]
    log_path: str

    @classmethod
    def of(cls, request: StepRequest, base_env: dict[str, str]) -> BuildAheadJob:
        """The job building request's image, in the environment a step of it would see, without GPUs: a build
        ahead runs beside a test, which its GPU work (a device query) must not disturb."""
        if request.image is None:
            raise ValueError("only a step on an image (--image venv) can have its image built ahead")
        recipe = request.image
        env = {**step_environment(request, (), base_env, BUILD_WORKER), "CUDA_VISIBLE_DEVICES": ""}
        return cls(
            request.repo, request.sha, request.build_cmd, recipe.mode, recipe.inputs, recipe.max_bytes,
            recipe.artifact, env, request.timeout_s, request.metric.infra_patterns, request.log_path,
        )  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildAheadJob:
        return cls(**{**data, "inputs": tuple(data["inputs"]), "infra_patterns": tuple(data["infra_patterns"])})


@dataclass(frozen=True)
class BuildAheadOutcome:
    sha: str
    status: AheadStatus
    build_s: float = 0.0
    detail: str = ""
    image: ImageInfo | None = None  # the image made (READY), for the store's images table

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "status": self.status.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildAheadOutcome:
        made = data.get("image")
        image = ImageInfo(**{**made, "evicted": tuple(made["evicted"])}) if isinstance(made, dict) else None
        return cls(str(data["sha"]), AheadStatus(data["status"]), float(data["build_s"]), str(data["detail"]), image)


class AheadBuilder(abc.ABC, Generic[BuildT]):
    """Builds images ahead of their steps where the executor's steps build them (Executor.ahead_builder): on this
    host (BuildAhead) or on Ray nodes (workers/ray_build_ahead.py); the search loop drives it. The `limit`
    likeliest next probes are wanted; at most `at_once` of them build at once (the host's build slots), likeliest
    first; each commit's at most once per bisect."""

    def __init__(self, limit: int, at_once: int | None = None) -> None:
        self.limit = limit
        self.at_once = limit if at_once is None else max(1, min(limit, at_once))
        self.running: dict[str, BuildT] = {}  # sha -> its build, while it runs
        self.outcomes: dict[str, BuildAheadOutcome] = {}  # sha -> how its build ended

    def want(self, requests: Sequence[StepRequest], relevant: Callable[[str], bool]) -> list[BuildAheadOutcome]:
        """Build the images of requests (best first) not built ahead yet, while fewer than at_once run; stop the
        builds of commits relevant() no longer holds (the search will not probe them: their images would go
        unused). Returns the outcomes of the builds that ended since the last call."""
        ended = self.reap()
        for sha in self.running:
            if not relevant(sha):
                self.stop(sha)
        for request in requests:
            if len(self.running) >= self.at_once:
                break
            if request.sha in self.running or request.sha in self.outcomes or not relevant(request.sha):
                continue
            if not self.start(request):
                break  # nowhere to build now: the next pass tries again
        return ended

    @abc.abstractmethod
    def start(self, request: StepRequest) -> bool:
        """Start request's build (in running; or, where none can start, its outcome in outcomes); False: there is
        nowhere to build it now."""

    @abc.abstractmethod
    def stop(self, sha: str) -> None:
        """Ask sha's running build to end; it leaves no image, and its outcome comes from a later reap()."""

    @abc.abstractmethod
    def reap(self) -> list[BuildAheadOutcome]:
        """The outcomes of the builds that ended since the last call."""

    @abc.abstractmethod
    def close(self) -> list[BuildAheadOutcome]:
        """Stop every build still running and wait for them; the outcomes since the last call."""


class _Child:
    def __init__(self, job: BuildAheadJob) -> None:
        self.job = job
        self.stopped_at: float | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bisector.workers.build_ahead_child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True,  # what it starts (uv, the build) goes with it
        )  # fmt: skip
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(asdict(job)) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:  # it died at once: nothing of it is left behind
            self.end()
            raise

    def stop(self) -> None:
        """End of file on its stdin: the child cancels its build."""
        if self.stopped_at is None:
            self.stopped_at = time.monotonic()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def end(self) -> None:
        """Kill the child's whole session (a child that would not stop: uv installing, a tree exported) and reap
        it; outcome() then ends what its build started."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def outcome(self) -> BuildAheadOutcome:
        """Once it exited: what it said, or that it died (then what its build started is ended here)."""
        assert self.proc.stdout is not None
        lines = self.proc.stdout.read().decode(errors="replace").splitlines()
        self.proc.stdout.close()
        self.stop()
        said = [line[len("outcome ") :] for line in lines if line.startswith("outcome ")]
        if self.proc.returncode == 0 and said:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                return BuildAheadOutcome.from_json(json.loads(said[-1]))
        pgids = [self.proc.pid, *(int(line.split()[1]) for line in lines if line.startswith("started "))]
        end_dead_worker(self.proc.pid, pgids, PGID_GRACE_S)
        detail = f"the build-ahead process exited {self.proc.returncode}"
        return BuildAheadOutcome(self.job.sha, AheadStatus.DIED, detail=detail)


class BuildAhead(AheadBuilder[_Child]):
    """Builds ahead on this host, each in a child process of its own, as many at once as the host has build slots
    (a child started beyond them would only wait for one); the coordinator's side."""

    def __init__(self, limit: int, base_env: dict[str, str] | None = None) -> None:
        super().__init__(limit, slot_count())
        self.base_env = dict(os.environ) if base_env is None else base_env

    def start(self, request: StepRequest) -> bool:
        try:
            Path(request.log_path).parent.mkdir(parents=True, exist_ok=True)
            self.running[request.sha] = _Child(BuildAheadJob.of(request, self.base_env))
        except OSError as exc:  # no process or folder to be had now: the step builds its image itself
            self.outcomes[request.sha] = BuildAheadOutcome(request.sha, AheadStatus.ERROR, detail=str(exc))
        return True

    def stop(self, sha: str) -> None:
        self.running[sha].stop()

    def reap(self) -> list[BuildAheadOutcome]:
        """The outcomes of the builds that ended since the last call; a child stopped STOP_GRACE_S ago and still
        running is ended."""
        now = time.monotonic()
        for child in self.running.values():
            if child.stopped_at is not None and now - child.stopped_at > STOP_GRACE_S and child.proc.poll() is None:
                child.end()
        ended = [sha for sha, child in self.running.items() if child.proc.poll() is not None]
        out = []
        for sha in ended:
            outcome = self.running.pop(sha).outcome()
            self.outcomes[sha] = outcome
            out.append(outcome)
        return out

    def close(self) -> list[BuildAheadOutcome]:
        """Stop every build still running and wait for its child (which kills the build first). Returns the
        outcomes of the builds that ended since the last call."""
        for child in self.running.values():
            child.stop()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.running.values():
            try:
                child.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.end()
        return self.reap()
