"""InProcessExecutor: runs real steps (real git worktrees, real subprocesses) on threads of this process.

The executor for coordinator tests and the fallback where worker processes cannot be spawned. Each slot
is a thread with its own worktree; the step's commands are real processes.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.vocab.errors import ExecutorError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.paths import worktree_root
from bisector.workers.executor import Assignment, Executor, StepRequest
from bisector.workers.gpu_leases import lease_exactly
from bisector.workers.step import StepRunner, WorkerSlot


class InProcessExecutor(Executor):
    def __init__(self, repo: str, workers: int, gpus: list[tuple[int, ...]] | None = None) -> None:
        GitRepo(repo).prune_worktrees()
        root = worktree_root(repo)
        slot_gpus = gpus or [() for _ in range(workers)]
        self._leases = lease_exactly(sorted({gpu for slot in slot_gpus for gpu in slot}))  # see gpu_leases.py
        self._slots = [
            WorkerSlot(name=f"thread-{i}", gpus=slot_gpus[i], worktree=Path(root) / f"inprocess-{i}")
            for i in range(workers)
        ]
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bisect-step")
        self._busy: dict[str, tuple[StepRequest, threading.Event]] = {}
        self._done: queue.Queue[tuple[str, StepResult]] = queue.Queue()

    @property
    def slots(self) -> int:
        return len(self._slots)

    def worker_names(self) -> list[str]:
        return [slot.name for slot in self._slots]

    def free_workers(self) -> list[str]:
        return [slot.name for slot in self._slots if slot.name not in self._busy]

    def submit(self, request: StepRequest) -> Assignment:
        free = [slot for slot in self._slots if slot.name not in self._busy]
        if not free:
            raise ExecutorError("no free worker slot")
        slot = next((s for s in free if s.name not in request.avoid_workers), free[0])
        if request.pin_worker:
            slot = next((s for s in free if s.name == request.pin_worker), None)  # type: ignore[assignment]
            if slot is None:
                raise ExecutorError(f"worker {request.pin_worker} is not free")
        cancel = threading.Event()
        self._busy[slot.name] = (request, cancel)
        future = self._pool.submit(StepRunner(slot).run, request, cancel.is_set)
        future.add_done_callback(lambda f, name=slot.name: self._finished(name, request, f))  # type: ignore[misc]
        return Assignment(slot.name, slot.node, slot.gpus)

    def _finished(self, slot_name: str, request: StepRequest, future: Future[StepResult]) -> None:
        try:
            result = future.result()
        except Exception as exc:  # the runner itself broke: an infrastructure error, never a verdict
            result = StepResult(
                step_id=request.step_id, sha=request.sha, verdict=Verdict.ERROR, error_kind=ErrorKind.HARNESS,
                detail=f"step runner failed: {exc!r}", log_path=request.log_path, worker=slot_name,
            )  # fmt: skip
        self._done.put((slot_name, result))

    def poll(self, timeout_s: float) -> list[StepResult]:
        if not self._busy:
            return []
        results: list[StepResult] = []
        try:
            item = self._done.get(timeout=timeout_s)
        except queue.Empty:
            return results
        while True:
            slot_name, result = item
            self._busy.pop(slot_name, None)
            results.append(result)
            try:
                item = self._done.get_nowait()
            except queue.Empty:
                return results

    def cancel(self, step_id: int) -> None:
        for request, flag in self._busy.values():
            if request.step_id == step_id:
                flag.set()

    def close(self) -> None:
        for _, flag in self._busy.values():
            flag.set()
        self._pool.shutdown(wait=True)
        self._leases.release()
