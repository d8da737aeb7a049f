"""StepActor: what runs on a Ray node for one RayExecutor slot — a StepRunner with its own worktree.

The executor creates it as a threaded actor: `run` executes in the default concurrency group (one step at a
time) while `cancel`, `info` and `stop_copy` answer from the "control" group, so a cancel reaches a running step,
and `image_offer` and `image_chunks` (ImageHolder) from the "images" group: another node's step copies an image
this node holds (workers/ray_image_peer.py) while this one runs its own.

Each test command runs in its own process group, announced to the actor's reaper (workers/ray_reaper.py), which
kills what is left of them when the actor dies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from bisector.vocab.domain import StepResult, Verdict
from bisector.vocab.errors import RepoError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.paths import data_dir, worktree_root
from bisector.workers import step_launcher
from bisector.workers.build_ahead import AheadStatus, BuildAheadJob, BuildAheadOutcome
from bisector.workers.build_ahead_child import build, lower_priority
from bisector.workers.executor import StepRequest
from bisector.workers.images.cache import ImageCache
from bisector.workers.node_files import NodeFiles
from bisector.workers.process import CancelSignal
from bisector.workers.ray_image_host import RayImageHost
from bisector.workers.ray_image_peer import ImageHolder, RayImagePeer
from bisector.workers.ray_reaper import Reaper
from bisector.workers.slots import claim_worktree
from bisector.workers.step import StepRunner, WorkerSlot

LOG_RETURN_LIMIT_BYTES = 4 << 20  # a log shipped back to the coordinator keeps its head and its tail
LOG_HEAD_BYTES = 64 << 10
EARLY_STOPS_KEPT = 64  # builds ahead stopped before they started (their calls queued behind two others)


@dataclass(frozen=True)
class ActorInfo:
    """Where a slot's actor landed and what Ray gave it."""

    pid: int
    hostname: str
    node_id: str
    gpus: tuple[int, ...]  # ray.get_gpu_ids(), which Ray also put in CUDA_VISIBLE_DEVICES
    cuda_visible_devices: str | None
    worktree: str


@dataclass(frozen=True)
class StepOutcome:
    """A step's result, with its log and its files (workers/node_files.py) when it ran on another node than the
    coordinator's."""

    result: StepResult
    log: bytes | None = None
    files: dict[str, bytes] = field(default_factory=dict)  # the coordinator's path -> the content


def _gpu_ids() -> tuple[int, ...]:
    ids = ray.get_gpu_ids()
    try:
        return tuple(int(str(g)) for g in ids)
    except ValueError:
        raise RuntimeError(f"Ray assigned GPU ids {ids}; gpu-bisect needs numeric CUDA device indices") from None


class StepActor(ImageHolder):
    """One worker slot on a Ray node. Created by RayExecutor through ray.remote(StepActor)."""

    def __init__(self, name: str, repo: str, slot_index: int, coordinator_node_id: str, image_root: str = "") -> None:
        """image_root: the image cache root the coordinator names for every node (a shared mount); empty: this
        node's own (images_root() in the node's environment)."""
        self._node_id = ray.get_runtime_context().get_node_id()
        self._ship_logs = self._node_id != coordinator_node_id
        worktree, self._lock_file = claim_worktree(worktree_root(repo), slot_index)  # held for the actor's life
        clean_for: str | None = None
        with contextlib.suppress(RepoError):  # made now, off the critical path; a failure shows at the first step
            GitRepo(repo).ensure_worktree(worktree, "HEAD")
            clean_for = repo
        self._slot = WorkerSlot(name=name, gpus=_gpu_ids(), worktree=worktree, node=socket.gethostname())
        self._image_host = RayImageHost(self._slot, self._node_id)  # a venv image's test runs in its interpreter
        ImageHolder.__init__(self, Path(image_root) if image_root else None)
        self._runner = StepRunner(
            self._slot, clean_for=clean_for, image_root=self._image_root, image_host=self._image_host
        )
        self._reaper = Reaper()
        self._cancelled: set[int] = set()
        self._running: int | None = None
        self._wake = CancelSignal()  # set when the running step is cancelled: its command stops at once
        self._lock = threading.Lock()
        self._builds: dict[str, CancelSignal] = {}  # a build ahead's token -> its stop
        self._early_stops: deque[str] = deque(maxlen=EARLY_STOPS_KEPT)  # tokens stopped before their build started
        step_launcher.keep_one_ready()  # its first step's command joins no cgroup on its path either

    def info(self) -> ActorInfo:
        return ActorInfo(
            pid=os.getpid(),
            hostname=self._slot.node,
            node_id=self._node_id,
            gpus=self._slot.gpus,
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            worktree=str(self._slot.worktree),
        )

    def cancel(self, step_id: int) -> None:
        """Called from the control group while `run` executes; a cancel may also arrive before its step starts."""
        with self._lock:
            self._cancelled.add(step_id)
            if step_id == self._running:
                self._wake.set()
                self._image_host.cancel()

    def run(self, request: StepRequest, image_peer: Any = None) -> StepOutcome:
        """image_peer: the actor of a slot on a node that holds the step's image (copied from there, not built)."""
        if self._is_cancelled(request.step_id):
            return StepOutcome(self._cancelled_before_start(request))
        local_request, files = request, NodeFiles({})
        if self._ship_logs:
            local_request, files = NodeFiles.of(request, Path(self._local_log_path(request)).parent)
        local_request = dataclasses.replace(local_request, log_path=self._local_log_path(request))
        groups: list[int] = []
        with self._lock:
            self._running = request.step_id
            self._wake.clear()
            if request.step_id in self._cancelled:  # arrived since the look above
                self._wake.set()

        def started(pgid: int) -> None:
            groups.append(pgid)
            self._reaper.started(pgid)

        try:
            result = self._runner.run(
                local_request,
                should_cancel=lambda: self._is_cancelled(request.step_id),
                on_start=started,
                cancel_fd=self._wake.fileno(),
                image_peer=RayImagePeer(image_peer) if image_peer is not None else None,
            )
        finally:
            for pgid in groups:  # run_shell killed what was left of each group when its command ended
                self._reaper.ended(pgid)
            with self._lock:
                self._cancelled.discard(request.step_id)
                self._running = None
        if not self._ship_logs:
            return StepOutcome(result)
        log = _read_bounded(Path(result.log_path))
        return StepOutcome(dataclasses.replace(result, log_path=request.log_path), log, files.collect())

    def build_ahead(self, request: StepRequest, token: str) -> BuildAheadOutcome:
        """Build request's image on this node ahead of its step (workers/ray_build_ahead.py), from the "builds"
        group while this slot's own step runs: as a step would build it, without GPUs, at a lower priority; what it
        starts dies with this actor (the reaper), and a failure keeps no image. token: this build's own (two
        bisects of a service may build one commit on one slot), which stop_build_ahead names."""
        cancel = CancelSignal()
        with self._lock:
            self._builds[token] = cancel
            if token in self._early_stops:
                cancel.set()
        groups: list[int] = []

        def started(pgid: int) -> None:
            groups.append(pgid)
            self._reaper.started(pgid)
            lower_priority(pgid)

        local = dataclasses.replace(request, log_path=self._local_log_path(request))
        try:
            Path(local.log_path).parent.mkdir(parents=True, exist_ok=True)
            job = BuildAheadJob.of(local, dict(os.environ))
            return build(job, cancel, on_start=started, cache=ImageCache(self._image_root))
        except Exception as exc:  # this build's failure, told to the coordinator; the step builds its image itself
            return BuildAheadOutcome(request.sha, AheadStatus.ERROR, detail=f"{type(exc).__name__}: {exc}"[:500])
        finally:
            for pgid in groups:
                self._reaper.ended(pgid)
            with self._lock:
                self._builds.pop(token, None)
            cancel.close()

    def stop_build_ahead(self, token: str) -> None:
        """From the control group: that build ends (it leaves no image), also one whose call is still queued."""
        with self._lock:
            if token in self._builds:
                self._builds[token].set()
            else:
                self._early_stops.append(token)

    def _is_cancelled(self, step_id: int) -> bool:
        with self._lock:
            return step_id in self._cancelled

    def _local_log_path(self, request: StepRequest) -> str:
        """The coordinator's path on its own node; on another node, a file under this node's data dir."""
        if not self._ship_logs:
            return request.log_path
        return str(data_dir() / "ray-logs" / f"bisect-{request.bisect_id}" / Path(request.log_path).name)

    def _cancelled_before_start(self, request: StepRequest) -> StepResult:
        return StepResult(
            step_id=request.step_id, sha=request.sha, verdict=Verdict.CANCELLED, detail="cancelled before it started",
            worker=self._slot.name, node=self._slot.node, gpus=self._slot.gpus,  # no log: nothing ran
        )  # fmt: skip


def _read_bounded(path: Path) -> bytes | None:
    try:
        with path.open("rb") as log:
            size = os.fstat(log.fileno()).st_size
            if size <= LOG_RETURN_LIMIT_BYTES:
                return log.read()
            head = log.read(LOG_HEAD_BYTES)
            tail_bytes = LOG_RETURN_LIMIT_BYTES - LOG_HEAD_BYTES
            log.seek(size - tail_bytes)
            omitted = size - LOG_HEAD_BYTES - tail_bytes
            return head + f"\n[... {omitted} bytes omitted by gpu-bisect ...]\n".encode() + log.read()
    except OSError:
        return None
