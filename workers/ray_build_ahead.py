"""Images built ahead of their steps on Ray nodes: the coordinator's side of `--build-ahead` with `--executor ray`.

The local executor's builds ahead run on the coordinator's host (workers/build_ahead.py); a Ray slot's steps build
on the slot's node, so there the build goes to a slot's actor (StepActor.build_ahead, in its "builds" concurrency
group, beside the step it runs). The node it ran on then holds the image: the executor's placement sends the
commit's step there, or another node copies it from there (workers/ray_image_peer.py), as for an image a step made.
A build goes to the live slot with the fewest builds ahead running, so that they spread over the nodes.

An AheadBuilder, as BuildAhead is: the search loop drives both the same way.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import ray
from ray import exceptions as ray_errors

from bisector.workers.build_ahead import STOP_GRACE_S, AheadBuilder, AheadStatus, BuildAheadOutcome
from bisector.workers.executor import StepRequest
from bisector.workers.ray_cluster import BUILDS_GROUP, CONTROL_GROUP, one_line

BUILDS_PER_SLOT = 2  # the "builds" group's threads on each slot's actor


class BuildHosts(Protocol):
    """What the executor lends: its live slots' actors and nodes, and where it keeps which node holds an image."""

    def build_hosts(self) -> list[tuple[str, Any, str]]: ...  # (worker, actor handle, node id) of each live slot

    def built_on(self, outcome: BuildAheadOutcome, node: str) -> None: ...


@dataclass
class _RayBuild:
    worker: str
    actor: Any
    node: str
    ref: Any  # ObjectRef of StepActor.build_ahead
    token: str  # names this build to its actor
    stopped_at: float | None = None


class RayBuildAhead(AheadBuilder[_RayBuild]):
    """Builds ahead on the Ray slots' nodes, each in a slot's actor."""

    def __init__(self, limit: int, hosts: BuildHosts, guard: AbstractContextManager[object] | None = None) -> None:
        """guard: held while the executor's slots are read (a service's pool shares the executor between threads)."""
        super().__init__(limit)
        self.hosts = hosts
        self.guard = guard if guard is not None else contextlib.nullcontext()

    def start(self, request: StepRequest) -> bool:
        host = self._least_busy()
        if host is None:
            return False  # no slot is up now (starting, or replaced after a loss), or each runs its most builds
        worker, actor, node = host
        token = uuid.uuid4().hex
        ref = actor.build_ahead.options(concurrency_group=BUILDS_GROUP).remote(request, token)
        self.running[request.sha] = _RayBuild(worker, actor, node, ref, token)
        return True

    def _least_busy(self) -> tuple[str, Any, str] | None:
        with self.guard:
            hosts = self.hosts.build_hosts()
        if not hosts:
            return None
        busy = {worker: 0 for worker, _, _ in hosts}
        for running in self.running.values():
            if running.worker in busy:
                busy[running.worker] += 1
        worker, actor, node = min(hosts, key=lambda host: busy[host[0]])
        return (worker, actor, node) if busy[worker] < BUILDS_PER_SLOT else None

    def stop(self, sha: str) -> None:
        running = self.running[sha]
        if running.stopped_at is None:
            running.stopped_at = time.monotonic()
            ended, _ = ray.wait([running.ref], timeout=0)
            if ended:
                return  # reaped next: no stop for the actor to keep
            with contextlib.suppress(ray_errors.RayError):  # its actor is gone, and the build with it (its reaper)
                running.actor.stop_build_ahead.options(concurrency_group=CONTROL_GROUP).remote(running.token)

    def reap(self) -> list[BuildAheadOutcome]:
        """The outcomes of the builds that ended since the last call; a build stopped STOP_GRACE_S ago that has not
        come back is given up on (its actor kills it when its command next looks, or when the actor ends)."""
        if not self.running:
            return []
        refs = {running.ref: sha for sha, running in self.running.items()}
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        now = time.monotonic()
        given_up = [
            sha for sha, r in self.running.items() if r.stopped_at is not None and now - r.stopped_at > STOP_GRACE_S
        ]
        return [self._ended(sha) for sha in dict.fromkeys([*(refs[ref] for ref in done), *given_up])]

    def _ended(self, sha: str) -> BuildAheadOutcome:
        running = self.running.pop(sha)
        outcome = self._outcome(sha, running)
        if outcome.status in (AheadStatus.READY, AheadStatus.REUSED):
            with self.guard:
                self.hosts.built_on(outcome, running.node)
        self.outcomes[sha] = outcome
        return outcome

    @staticmethod
    def _outcome(sha: str, running: _RayBuild) -> BuildAheadOutcome:
        try:
            ready, _ = ray.wait([running.ref], timeout=0)
            if not ready:
                return BuildAheadOutcome(
                    sha, AheadStatus.DIED, detail=f"no answer from {running.worker} after its stop"
                )
            outcome: BuildAheadOutcome = ray.get(running.ref)
        except ray_errors.RayError as exc:  # the slot's actor or node was lost: its builds went with it
            return BuildAheadOutcome(sha, AheadStatus.DIED, detail=f"{running.worker} was lost: {one_line(exc)}")
        return outcome

    def close(self) -> list[BuildAheadOutcome]:
        """Stop every build still running and wait for them, STOP_GRACE_S at most; the outcomes since the last call."""
        ended = self.reap()  # those done already keep their outcome (a ready image is recorded)
        for sha in self.running:
            self.stop(sha)
        refs = [running.ref for running in self.running.values()]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=STOP_GRACE_S)
        ended += self.reap()
        return ended + [self._ended(sha) for sha in list(self.running)]  # what has not come back: given up on
