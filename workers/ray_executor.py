"""RayExecutor: one Ray actor per worker slot, placed by Ray with num_gpus=K and optional custom resources.

Each slot is a StepActor (workers/ray_actor.py) that owns a worktree on its node, under that node's per-user
cache dir, and runs StepRunner there; results come back through Ray and the coordinator alone writes the store.
Logs: on the coordinator's node the step writes its log where the coordinator asked; on another node it writes
under that node's data dir and ships the log back with the result (head and tail beyond 4 MiB), with the files its
env names under the log's folder (workers/node_files.py), and the executor writes them at the coordinator's paths.

A slot whose actor, worker process or node dies mid-step reports the step as an infrastructure error
(WORKER_LOST) and gets a fresh actor, which Ray may place anywhere; a slot lost more than `max_restarts`
times is retired. The test's process groups die with the actor (see the reaper in workers/ray_actor.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.vocab.errors import ExecutorError, InputError
from bisector.workers.build_ahead import BuildAheadOutcome
from bisector.workers.executor import Assignment, Executor, StepRequest
from bisector.workers.gpu_leases import GpuLeases
from bisector.workers.image_placement import ImagePlacement
from bisector.workers.images.cache import IMAGE_ROOT_ENV
from bisector.workers.node_files import deliver

try:
    import ray
    from ray import exceptions as ray_errors

    from bisector.workers.ray_actor import ActorInfo, StepActor, StepOutcome
    from bisector.workers.ray_build_ahead import BUILDS_PER_SLOT, RayBuildAhead
    from bisector.workers.ray_cluster import (
        BUILDS_GROUP,
        CONTROL_GROUP,
        CPUS_PER_SLOT,
        RayHold,
        checked_resources,
        cluster_total,
        connect,
        describe,
        one_line,
        release,
        resolve_gpus_per_step,
    )
    from bisector.workers.ray_image_peer import IMAGES_GROUP
except ImportError as exc:
    raise ExecutorError(f"--executor ray needs Ray ({exc}): pip install 'gpu-bisect[ray]'") from None

START_TIMEOUT_S = 120.0  # how long Ray may take to place a slot's actor (an autoscaler adds nodes meanwhile)
START_GRACE_S = 15.0  # once one slot is up, how long the start waits for the others
MAX_RESTARTS = 3  # fresh actors per slot after losses; then the slot is retired
__all__ = ["RayExecutor", "checked_resources"]


@dataclass
class _Running:
    request: StepRequest
    ref: Any  # ObjectRef of StepActor.run
    cancelled: bool = False


@dataclass
class _Slot:
    index: int
    name: str
    actor: Any  # ActorHandle of a StepActor
    starting: Any | None  # ObjectRef of StepActor.info until the actor is up
    restarts: int = 0
    info: ActorInfo | None = None
    running: _Running | None = None

    @property
    def free(self) -> bool:
        return self.info is not None and self.running is None


class RayExecutor(Executor):
    def __init__(
        self,
        repo: str,
        workers: int,
        gpus_per_step: int | None = None,
        resources: dict[str, float] | None = None,
        address: str | None = None,
        *,
        start_timeout_s: float = START_TIMEOUT_S,
        start_grace_s: float = START_GRACE_S,
        max_restarts: int = MAX_RESTARTS,
        image_root: str | None = None,
    ) -> None:
        """start_grace_s: how long the start waits for the other slots once one is up (the rest join later).
        image_root: the image cache root every node mounts (default $BISECT_IMAGE_ROOT of this process); without
        one each node keeps its own images (built again per node) and steps prefer nodes that hold theirs."""
        if workers < 1:
            raise InputError(f"--workers must be at least 1 (got {workers})")
        self._resources = checked_resources(resources or {})
        self._repo = repo
        self._start_timeout_s = start_timeout_s
        self._start_grace_s = start_grace_s
        self._max_restarts = max_restarts
        self._image_root = image_root if image_root is not None else os.environ.get(IMAGE_ROOT_ENV, "")
        self._placement = ImagePlacement()
        self._retired: list[str] = []
        self._lost_any = False  # a slot's actor was lost: Ray's session logs are kept for a look
        self._slots: dict[str, _Slot] = {}
        self._leases = GpuLeases()
        try:
            self._ray = connect(address, workers, gpus_per_step, self._leases)
        except BaseException:
            self._leases.release()
            raise
        try:
            self._gpus_per_step = resolve_gpus_per_step(gpus_per_step)
            self._coordinator_node = ray.get_runtime_context().get_node_id()
            groups = {CONTROL_GROUP: 2, IMAGES_GROUP: 2, BUILDS_GROUP: BUILDS_PER_SLOT}
            threaded = ray.remote(concurrency_groups=groups)  # type: ignore[call-overload]
            self._actor_class = threaded(StepActor).options(
                num_cpus=CPUS_PER_SLOT,
                num_gpus=self._gpus_per_step,
                resources=self._resources,
                max_restarts=0,  # a lost actor's step must come back as lost, not be re-run silently
                max_task_retries=0,
            )
            self._slots = {slot.name: slot for slot in (self._new_slot(i) for i in range(workers))}
            self._await_first_start()
        except BaseException:
            self.close()
            raise

    # --- slots -----------------------------------------------------------------------------------------------

    def _new_slot(self, index: int, restarts: int = 0) -> _Slot:
        name = f"ray-{index}"
        actor: Any = self._actor_class.remote(name, self._repo, index, self._coordinator_node, self._image_root)
        return _Slot(index, name, actor, actor.info.options(concurrency_group=CONTROL_GROUP).remote(), restarts)

    def _await_first_start(self) -> None:
        """Wait until every actor is up, or start_grace_s after the first one: slots that Ray places later
        (a busy shared cluster) join the bisect when they come up."""
        deadline = time.monotonic() + self._start_timeout_s
        first_up: float | None = None
        while any(slot.starting is not None for slot in self._slots.values()):
            if first_up is None and any(slot.info is not None for slot in self._slots.values()):
                first_up = time.monotonic()
                deadline = min(deadline, first_up + self._start_grace_s)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._check_starting(remaining, fail_fast=True)
        if not any(slot.info is not None for slot in self._slots.values()):
            raise ExecutorError(
                f"Ray placed none of the {len(self._slots)} worker(s) within {self._start_timeout_s:g}s: each needs "
                f"{describe(self._requirement())}; the cluster has {describe(cluster_total())}"
            )

    def _requirement(self) -> dict[str, float]:
        return {"CPU": CPUS_PER_SLOT, "GPU": self._gpus_per_step, **self._resources}

    def _check_starting(self, timeout_s: float, *, fail_fast: bool = False) -> None:
        """Take in every actor that is up, waiting up to timeout_s for the first one.

        An actor that failed to start is replaced (bounded), or raises ExecutorError with fail_fast.
        """
        starting = {slot.starting: slot for slot in self._slots.values() if slot.starting is not None}
        if not starting:
            return
        ready, _ = ray.wait(list(starting), num_returns=1, timeout=timeout_s)
        if ready:
            ready, _ = ray.wait(list(starting), num_returns=len(starting), timeout=0)
        for ref in ready:
            slot = starting[ref]
            slot.starting = None
            try:
                slot.info = ray.get(ref)
            except ray_errors.RayError as exc:
                if fail_fast:
                    raise ExecutorError(f"Ray worker {slot.name} could not start: {one_line(exc)}") from None
                self._replace(slot)

    def _replace(self, slot: _Slot) -> None:
        self._lost_any = True
        with contextlib.suppress(Exception):  # a partitioned actor must not go on running the step
            ray.kill(slot.actor, no_restart=True)
        if slot.restarts >= self._max_restarts:
            del self._slots[slot.name]
            self._retired.append(slot.name)
        else:
            self._slots[slot.name] = self._new_slot(slot.index, slot.restarts + 1)

    def _await_any_slot(self) -> None:
        """Block until some slot can take a step: the coordinator takes zero capacity with nothing in flight
        for the end of the search, so a restart must not look like that."""
        deadline = time.monotonic() + self._start_timeout_s
        while not any(slot.info is not None for slot in self._slots.values()):
            remaining = deadline - time.monotonic()
            if not self._slots:
                raise ExecutorError(
                    f"every Ray worker ({', '.join(self._retired)}) was lost {self._max_restarts + 1} times; "
                    "the bisect is kept in the store: resume it once the cluster is healthy"
                )
            if remaining <= 0:
                raise ExecutorError(
                    f"no Ray worker came back within {self._start_timeout_s:g}s after losses: each needs "
                    f"{describe(self._requirement())}; the cluster has {describe(cluster_total())}"
                )
            self._check_starting(remaining)

    # --- Executor --------------------------------------------------------------------------------------------

    @property
    def slots(self) -> int:
        return len(self._slots)

    def worker_names(self) -> list[str]:
        return list(self._slots)

    def free_workers(self) -> list[str]:
        self._check_starting(0)
        if not any(slot.info is not None for slot in self._slots.values()):
            self._await_any_slot()
        return [slot.name for slot in self._slots.values() if slot.free]

    def submit(self, request: StepRequest) -> Assignment:
        free = [slot for slot in self._slots.values() if slot.free]
        if not free:
            raise ExecutorError("no free worker slot")
        preferred = [s.name for s in free if s.name not in request.avoid_workers] or [s.name for s in free]
        slot = self._slots[self.prefer_workers(request, preferred)[0]]
        if request.pin_worker:
            pinned = [s for s in free if s.name == request.pin_worker]
            if not pinned:
                raise ExecutorError(f"worker {request.pin_worker} is not free")
            slot = pinned[0]
        assert slot.info is not None
        slot.running = _Running(request, slot.actor.run.remote(request, self._image_holder(request, slot)))
        return Assignment(slot.name, slot.info.hostname, slot.info.gpus)

    def _image_holder(self, request: StepRequest, slot: _Slot) -> Any:
        """Where the nodes share no image root and the step's node lacks its image: the actor of a slot on a node
        that holds it (the step copies the image from there rather than building it), else None."""
        holders = self._placement.nodes_of(request)
        if self._image_root or not holders or slot.info is None or slot.info.node_id in holders:
            return None
        return next((s.actor for s in self._slots.values() if s.info is not None and s.info.node_id in holders), None)

    def ahead_builder(self, limit: int, guard: AbstractContextManager[object] | None = None) -> RayBuildAhead:
        """Builds ahead go to the slots' actors: each on its node, beside the step it runs."""
        return RayBuildAhead(limit, self, guard)

    def build_hosts(self) -> list[tuple[str, Any, str]]:
        """(worker, actor, node id) of every slot whose actor is up."""
        return [(s.name, s.actor, s.info.node_id) for s in self._slots.values() if s.info is not None]

    def built_on(self, outcome: BuildAheadOutcome, node: str) -> None:
        """An image built ahead on node: its commit's step prefers that node (or copies the image from there)."""
        self._placement.record_image(outcome.image, node)

    def prefer_workers(self, request: StepRequest, workers: Sequence[str]) -> list[str]:
        """workers on a node that holds the step's image (it ran a step on it) first."""

        def node_of(worker: str) -> str | None:
            slot = self._slots.get(worker)
            return slot.info.node_id if slot is not None and slot.info is not None else None

        return self._placement.rank(request, workers, node_of)

    def poll(self, timeout_s: float) -> list[StepResult]:
        running = {slot.running.ref: slot for slot in self._slots.values() if slot.running is not None}
        if not running:
            return []
        ready, _ = ray.wait(list(running), num_returns=1, timeout=timeout_s)
        if ready:
            ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
        return [self._collect(running[ref]) for ref in ready]

    def _collect(self, slot: _Slot) -> StepResult:
        run = slot.running
        assert run is not None
        assert slot.info is not None
        slot.running = None
        try:
            outcome: StepOutcome = ray.get(run.ref)
        except ray_errors.RayTaskError as exc:  # the runner raised; the actor lives on
            detail = f"step runner failed: {one_line(exc, last=True)}"
            return self._failed(run, slot.info, slot.name, ErrorKind.HARNESS, detail)
        except ray_errors.RayError as exc:  # actor, worker process or node gone
            self._replace(slot)
            if run.cancelled:
                return self._failed(run, slot.info, slot.name, None, "cancelled; its Ray worker was lost meanwhile")
            retired = " (slot retired: lost too often)" if slot.name in self._retired else ""
            detail = f"Ray worker {slot.name} (pid {slot.info.pid} on {slot.info.hostname}) was lost mid-step{retired}"
            return self._failed(run, slot.info, slot.name, ErrorKind.WORKER_LOST, f"{detail}: {one_line(exc)}")
        self._placement.record(outcome.result, slot.info.node_id)
        return _delivered(run.request, outcome)

    @staticmethod
    def _failed(run: _Running, info: ActorInfo, worker: str, kind: ErrorKind | None, detail: str) -> StepResult:
        return StepResult(
            step_id=run.request.step_id, sha=run.request.sha,
            verdict=Verdict.ERROR if kind is not None else Verdict.CANCELLED, error_kind=kind, detail=detail,
            log_path=run.request.log_path, worker=worker, node=info.hostname, gpus=info.gpus,
        )  # fmt: skip

    def cancel(self, step_id: int) -> None:
        for slot in self._slots.values():
            if slot.running is not None and slot.running.request.step_id == step_id:
                slot.running.cancelled = True
                slot.actor.cancel.options(concurrency_group=CONTROL_GROUP).remote(step_id)

    def abandon(self, step_id: int) -> None:
        """A step that never reported: its actor is killed (its reaper kills the test); poll sees the loss and
        starts a new actor for the slot."""
        for slot in self._slots.values():
            if slot.running is not None and slot.running.request.step_id == step_id:
                slot.running.cancelled = True
                with contextlib.suppress(Exception):
                    ray.kill(slot.actor, no_restart=True)

    def close(self) -> None:
        for slot in self._slots.values():
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)  # the actor's reaper kills its test's process groups
        self._slots = {}
        hold, self._ray = self._ray, RayHold(owned=False)
        release(hold, keep_logs=self._lost_any)
        self._leases.release()

    # --- diagnostics (reports, fault-injection tests) ---------------------------------------------------------

    def worker_info(self) -> dict[str, ActorInfo]:
        """Where each started slot's actor runs: pid, host, Ray node id, GPU ids, worktree."""
        return {slot.name: slot.info for slot in self._slots.values() if slot.info is not None}

    def local_session(self) -> Path | None:
        """The session folder (Ray's logs) of the local cluster this executor started, if it started one."""
        return self._ray.local_session

    def worker_pids(self) -> dict[str, int]:
        return {name: info.pid for name, info in self.worker_info().items()}

    def actor_handles(self) -> dict[str, Any]:
        return {slot.name: slot.actor for slot in self._slots.values()}

    def retired_workers(self) -> list[str]:
        return list(self._retired)


# --- results ----------------------------------------------------------------------------------------------------


def _delivered(request: StepRequest, outcome: StepOutcome) -> StepResult:
    """The step's result, its shipped log and files written where the coordinator expects them."""
    try:
        deliver({request.log_path: outcome.log} if outcome.log is not None else {})
        deliver(outcome.files)
    except OSError as exc:
        return replace(outcome.result, detail=f"{outcome.result.detail}\n(log or files not saved here: {exc})".strip())
    return outcome.result
