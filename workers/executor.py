"""The one small interface every executor implements, and what flows through it.

The coordinator submits StepRequests to free slots and polls for StepResults; workers never touch
the store. An executor reports every submitted step exactly once: finished, cancelled, or lost.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from bisector.vocab.domain import StepResult
from bisector.vocab.processes import ProcessGroup
from bisector.workers.build_ahead import AheadBuilder, BuildAhead
from bisector.workers.step_request import StepRequest, step_environment

__all__ = ["Assignment", "Executor", "StepRequest", "step_environment"]


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
        """The names of the slots that can take a step now. An executor shared by several coordinators (a pool's
        view, workers/pool.py) sets them aside for this one until its next poll(): a coordinator that will not
        submit for a while polls first, with timeout 0 if need be."""

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

    def process_groups(self, step_ids: Collection[int] | None = None) -> list[ProcessGroup]:
        """The process groups on this host that the running steps' commands lead (those of step_ids alone, where
        given), as far as they have started, each with its leader's start time read by the worker that started it:
        what a reaper ends if the process driving this executor dies (its workers with it). None here: steps that
        run in this process, or whose groups end with their worker wherever it dies (Ray's, see RayExecutor)."""
        return []

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every worker, killing what still runs."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
