"""The one small interface every executor implements, and what flows through it.

The coordinator submits StepRequests to free slots and polls for StepResults; workers never touch
the store. An executor reports every submitted step exactly once: finished, cancelled, or lost.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bisector.vocab.domain import StepResult
from bisector.vocab.metric import MetricSpec
from bisector.workers.images.key import ImageRecipe

if TYPE_CHECKING:
    from bisector.workers.build_ahead import AheadBuilder


@dataclass(frozen=True)
class StepRequest:
    step_id: int
    bisect_id: int
    sha: str
    attempt: int
    repo: str
    run_cmd: str
    metric: MetricSpec
    log_path: str
    timeout_s: float
    build_cmd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    avoid_workers: frozenset[str] = frozenset()  # workers that already failed this commit
    pin_worker: str = ""  # run on exactly this worker (it must be free): confirmation pairs, reference checks
    image: ImageRecipe | None = None  # build once per image and run there (workers/images), not in the worktree
    preemptible: bool = False  # a search run: a shared pool may cancel it for a bisect holding no slot
    container: str | None = None  # the commit's container image: the test runs in it (workers/container.py)
    no_gpu: bool = False  # --gpus-per-step 0: the step sees no GPU (CUDA_VISIBLE_DEVICES empty), whatever its slot has


def step_environment(
    request: StepRequest, gpus: tuple[int, ...], base: dict[str, str], worker: str = ""
) -> dict[str, str]:
    """The environment a step's commands see: the base, the spec's env, the GPU slot (none for a no_gpu request),
    the step's ids."""
    env = dict(base)
    env.update(request.env)
    if gpus or request.no_gpu:
        env["CUDA_VISIBLE_DEVICES"] = "" if request.no_gpu else ",".join(str(g) for g in gpus)
    env["BISECT_SHA"] = request.sha
    env["BISECT_STEP_ID"] = str(request.step_id)
    env["BISECT_ATTEMPT"] = str(request.attempt)
    if worker:
        env["BISECT_WORKER"] = worker
    return env


@dataclass(frozen=True)
class Assignment:
    """Where a submitted step runs."""

    worker: str
    node: str
    gpus: tuple[int, ...]


class Executor(abc.ABC):
    """Runs steps on worker slots. Not thread-safe: one coordinator drives it."""

    @property
    @abc.abstractmethod
    def slots(self) -> int:
        """How many steps can run at once."""

    @abc.abstractmethod
    def worker_names(self) -> list[str]:
        """Every worker slot's name."""

    @abc.abstractmethod
    def free_workers(self) -> list[str]:
        """The names of the slots that can take a step now."""

    def free_slots(self) -> int:
        return len(self.free_workers())

    def prefer_workers(self, request: StepRequest, workers: Sequence[str]) -> list[str]:
        """workers ordered best first for request where nothing else tells them apart (an executor over several
        nodes puts those that hold the step's image first); this one keeps the order given."""
        return list(workers)

    def ahead_builder(self, limit: int, guard: AbstractContextManager[object] | None = None) -> AheadBuilder[Any]:
        """What builds the images of the likely next probes while the steps run (--build-ahead, at most limit at
        once): where this executor's steps build theirs, which is this host here. guard: held while it reads the
        executor's state (a pool shares the executor between threads)."""
        from bisector.workers.build_ahead import BuildAhead  # it imports this module

        return BuildAhead(limit)

    @abc.abstractmethod
    def submit(self, request: StepRequest) -> Assignment:
        """Start a step on a free slot: request.pin_worker, else one not in request.avoid_workers when possible
        (among those, prefer_workers' first)."""

    @abc.abstractmethod
    def poll(self, timeout_s: float) -> list[StepResult]:
        """Results of steps that ended, waiting up to timeout_s for the first one."""

    @abc.abstractmethod
    def cancel(self, step_id: int) -> None:
        """Stop a running step; its result comes back from poll() as CANCELLED."""

    def abandon(self, step_id: int) -> None:
        """Give up on a step that never reported (the coordinator's watchdog): stop it as a cancel does, and an
        executor that can tell a hung worker replaces it. A late report of the step may still come."""
        self.cancel(step_id)

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every worker, killing what still runs."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
