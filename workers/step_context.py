"""StepContext: one step in progress on a worker slot, as every way of building and running it (in the worktree, on
a venv image, in a container) needs it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from bisector.vocab.domain import ImageInfo, StepResult, Verdict
from bisector.workers.executor import StepRequest
from bisector.workers.images.transfer import ImagePeer
from bisector.workers.output import StepLog


@dataclass(frozen=True)
class StepContext:
    request: StepRequest  # the commit, its build and test commands, the spec's env, the timeout
    log: StepLog  # the step's log: notes and every command's output go there
    env: dict[str, str]  # the environment the step's commands see (workers.executor.step_environment)
    workdir: Path  # where the commands run: the slot's worktree, or the image's tree
    gpus: tuple[int, ...]  # the slot's GPUs
    started: float  # time.monotonic() at the step's start: the timeout covers its build and its test
    should_cancel: Callable[[], bool] = lambda: False
    on_start: Callable[[int], None] = lambda pgid: None  # told each command's process group
    cancel_fd: int | None = None  # a CancelSignal's: a cancel stops the running command at once
    image_peer: ImagePeer | None = None  # a node that may hold the step's image, to copy rather than build

    def time_left_s(self) -> float:
        """Seconds left of the step's timeout (negative once it is over)."""
        return time_left_s(self.request, self.started)

    def command_timeout_s(self) -> float:
        """What the next command may take: the time left, but never nothing (run_shell needs a positive bound)."""
        return max(self.time_left_s(), 0.001)

    def moved(self, workdir: Path, env: dict[str, str] | None = None) -> StepContext:
        """The same step, its commands run in workdir (with env)."""
        return replace(self, workdir=workdir, env=self.env if env is None else env)


def time_left_s(request: StepRequest, started: float) -> float:
    return request.timeout_s - (time.monotonic() - started)


class NodeNamed(Protocol):
    @property
    def node(self) -> str: ...


class StepJudge(Protocol):
    """What a step's helpers (its container, its container image) ask of the StepRunner that runs the step."""

    @property
    def slot(self) -> NodeNamed: ...

    def result(self, request: StepRequest, verdict: Verdict, **values: object) -> StepResult: ...

    def run_test(
        self, step: StepContext, build_s: float, image: ImageInfo | None, command: str | None = None
    ) -> StepResult: ...
