"""LocalExecutor: one worker process per slot on this host, each with its GPUs and its own worktree.

Worker processes are long-lived (forked once from a fork server, reused across steps) and talk to the coordinator over a
pipe each. A worker that dies mid-step is detected through its process sentinel: the step comes back as
an infrastructure error (WORKER_LOST), the test's orphaned process group is killed, and the slot gets a
fresh process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.vocab.errors import ExecutorError, RepoError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.paths import worktree_root
from bisector.vocab.processes import ProcessGroup, process_start
from bisector.workers import step_launcher
from bisector.workers.cgroups import end_dead_worker
from bisector.workers.executor import Assignment, Executor, StepRequest
from bisector.workers.gpu_leases import lease_slots
from bisector.workers.gpus import visible_gpus
from bisector.workers.local_forkserver import boot as boot_fork_server
from bisector.workers.process import CancelSignal
from bisector.workers.process_tree import end_groups
from bisector.workers.slots import claim_worktree

_STOP = "stop"
_CANCEL = "cancel"
_START_ATTEMPTS = 3
_START_RETRY_S = 0.2
_IDLE_LOOK_S = 0.1  # how often an idle worker looks whether a stop signal came


def _worker_main(
    name: str,
    gpus: tuple[int, ...],
    repo: str,
    slot_index: int,
    conn: Connection,
    environ: dict[str, str],
    cwd: str,
    worktree_first: bool,
) -> None:
    """The loop of one worker process: run each request it is sent, send back its result. worktree_first: check out
    the slot's worktree before the first request comes (steps on images run in their image: a step that needs the
    worktree makes it then).

    It stops, killing its running test's process group (SIGTERM, grace, SIGKILL) and printing nothing, when the
    coordinator says so or its pipe closes (the coordinator died), and on SIGINT, SIGTERM or SIGHUP (a Ctrl-C or a
    CI runner's SIGTERM to the coordinator's process group reaches the workers too; their tests run in sessions
    of their own and would outlive them)."""
    from bisector.workers.step import StepRunner, WorkerSlot  # the coordinator, which imports this module, runs no step

    stopping = _StopFlag()
    stopping.install()
    # A fork server's child starts with the server's environment and directory, which were the coordinator's
    # when the server started; take the coordinator's current ones.
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    worktree, lock_file = claim_worktree(worktree_root(repo), slot_index)
    clean_for: str | None = None
    opened: list[GitRepo] = []
    # Made and opened now, off the critical path; a failure shows at the first step.
    with contextlib.suppress(RepoError, OSError):
        handle = GitRepo(repo)
        opened.append(handle)
        if worktree_first:
            handle.ensure_worktree(worktree, "HEAD")
            clean_for = repo
    runner = StepRunner(WorkerSlot(name=name, gpus=gpus, worktree=worktree), clean_for=clean_for, opened=opened)
    inbox: queue.Queue[object] = queue.Queue()
    cancel_flag = stopping.cancel
    current_step: list[int] = [-1]
    cancelled_early: set[int] = set()  # cancels that arrived before their step started
    # The listener's "is it the running step?" and the loop's "this step runs now" must not interleave: a cancel
    # could be lost, or a late one for the step before could stop the next.
    step_lock = threading.Lock()

    def listen() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = _STOP
            if message == _STOP:
                stopping.set()
                inbox.put(_STOP)
                return
            if isinstance(message, tuple) and message[0] == _CANCEL:
                with step_lock:
                    if message[1] == current_step[0]:
                        cancel_flag.set()
                    else:
                        cancelled_early.add(message[1])
            else:
                inbox.put(message)

    threading.Thread(target=listen, daemon=True).start()
    step_launcher.keep_one_ready()  # the first step's launcher joins its cgroup while the first request comes
    try:
        with lock_file:
            while (request := _next_request(inbox, stopping)) is not None:
                with step_lock:
                    cancel_flag.clear()
                    current_step[0] = request.step_id
                    if request.step_id in cancelled_early or stopping.is_set():
                        cancelled_early.discard(request.step_id)
                        cancel_flag.set()
                try:
                    result = runner.run(
                        request,
                        should_cancel=lambda: cancel_flag.is_set() or stopping.is_set(),
                        on_start=_announcer(conn, request.step_id),
                        cancel_fd=cancel_flag.fileno(),
                    )
                except Exception as exc:  # the runner itself broke: the harness's failure, never the commit's
                    result = runner.harness_error(request, f"step runner failed: {exc!r}")
                with step_lock:
                    current_step[0] = -1
                try:
                    conn.send(result)
                except OSError:  # the coordinator is gone
                    return
                if stopping.is_set():
                    return
                runner.tidy(request)  # while the coordinator chooses this worker's next step
    finally:
        step_launcher.discard_all()


class _StopFlag:
    """Set by the coordinator's stop, its pipe closing, or a stop signal; setting it wakes the running step."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.cancel = CancelSignal()
        self._set = False

    def install(self) -> None:
        for signum in self.SIGNALS:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        # Only a flag and a byte down a pipe: the handler may interrupt this thread anywhere, locks included.
        self._set = True
        self.cancel.set_from_signal_handler()

    def set(self) -> None:
        self._set = True
        self.cancel.set()

    def is_set(self) -> bool:
        return self._set


def _next_request(inbox: queue.Queue[object], stopping: _StopFlag) -> StepRequest | None:
    """The next step to run, or None once the worker is to stop."""
    while not stopping.is_set():
        try:
            message = inbox.get(timeout=_IDLE_LOOK_S)
        except queue.Empty:
            continue
        if message == _STOP:
            return None
        assert isinstance(message, StepRequest)
        return message
    return None


def _announcer(conn: Connection, step_id: int) -> Callable[[int], None]:
    """Tells the coordinator each process group a step starts, so it can kill them if this worker dies, with its
    leader's start time (None where /proc does not show it), read here: on_start is told before the leader is
    reaped, so its pid still names it."""

    def announce(pgid: int) -> None:
        conn.send(("started", step_id, pgid, process_start(pgid)))

    return announce


@dataclass
class _Slot:
    index: int
    name: str
    gpus: tuple[int, ...]
    process: BaseProcess
    conn: Connection
    running: StepRequest | None = None
    groups: set[ProcessGroup] = field(default_factory=set)  # as announced (those whose leader's start time was read)


def _take_group(slot: _Slot, started: tuple[Any, ...]) -> None:
    """Keep the process group a worker announced ("started", step id, pgid, its leader's start time or None): one
    whose leader's start time is unknown could not be told from a later process that reuses its pid."""
    if started[3] is not None:
        slot.groups.add(ProcessGroup(int(started[2]), str(started[3])))


class LocalExecutor(Executor):
    def __init__(self, repo: str, workers: int, gpus_per_step: int | None = None, *, worktrees: bool = True) -> None:
        """worktrees: whether steps run in the slots' worktrees (not on images), so that each worker checks its
        out as it starts."""
        self._repo = repo
        self._worktrees = worktrees
        GitRepo(repo).prune_worktrees()
        # Workers fork from a server that has imported this module once (`bisect start` boots it early).
        self._context = boot_fork_server()
        # GPUs leased per host (workers/gpu_leases.py): another bisect's GPUs are never handed out here.
        slot_gpus, self._leases = lease_slots(visible_gpus(), workers, gpus_per_step)
        self._slots: list[_Slot] = []
        try:
            for index, gpus in enumerate(slot_gpus):
                self._slots.append(self._start_slot(index, gpus))
        except BaseException:
            self.close()
            raise

    def _start_slot(self, index: int, gpus: tuple[int, ...]) -> _Slot:
        name = f"local-{index}"
        attempt = 1
        while True:
            try:
                return self._fork_slot(index, name, gpus)
            except (OSError, EOFError) as exc:
                # A fork server that died (killed with some of the job) answers EOF mid-fork, or refuses the
                # connection before it is a zombie that the next start sees dead and replaces.
                if attempt == _START_ATTEMPTS:
                    raise ExecutorError(f"cannot start local worker {name}: {exc}") from None
            attempt += 1
            time.sleep(_START_RETRY_S)

    def _fork_slot(self, index: int, name: str, gpus: tuple[int, ...]) -> _Slot:
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_worker_main,
            args=(name, gpus, self._repo, index, child, dict(os.environ), os.getcwd(), self._worktrees),
            name=f"bisect-{name}",
            daemon=True,
        )
        try:
            process.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        return _Slot(index, name, gpus, process, parent)

    @property
    def slots(self) -> int:
        return len(self._slots)

    def worker_names(self) -> list[str]:
        return [slot.name for slot in self._slots]

    def free_workers(self) -> list[str]:
        return [slot.name for slot in self._slots if slot.running is None]

    def submit(self, request: StepRequest) -> Assignment:
        free = [slot for slot in self._slots if slot.running is None]
        if not free:
            raise ExecutorError("no free worker slot")
        preferred = [slot for slot in free if slot.name not in request.avoid_workers] or free
        if request.pin_worker:
            preferred = [slot for slot in free if slot.name == request.pin_worker]
            if not preferred:
                raise ExecutorError(f"worker {request.pin_worker} is not free")
        slot = preferred[0]
        try:
            slot.conn.send(request)
        except OSError:  # the worker died while idle: start a fresh one in its place and send it there
            slot = self._restart(slot)
            try:
                slot.conn.send(request)
            except OSError as exc:
                raise ExecutorError(f"local worker {slot.name} died at start: {exc}") from None
        slot.running = request
        return Assignment(slot.name, "localhost", slot.gpus)

    def _restart(self, slot: _Slot) -> _Slot:
        slot.conn.close()
        slot.process.join(timeout=1)
        fresh = self._start_slot(slot.index, slot.gpus)
        self._slots[slot.index] = fresh
        return fresh

    def poll(self, timeout_s: float) -> list[StepResult]:
        """Results that come back within timeout_s. A worker's note that its step's process started is taken in
        here and waited past: it gives the coordinator nothing to decide (W of them arrive at every round)."""
        deadline = time.monotonic() + timeout_s
        results: list[StepResult] = []
        while not results:
            busy = [slot for slot in self._slots if slot.running is not None]
            if not busy:
                return []
            waitables: dict[Any, _Slot] = {}
            for slot in busy:
                waitables[slot.conn] = slot
                waitables[slot.process.sentinel] = slot
            ready_now = multiprocessing.connection.wait(list(waitables), timeout=max(deadline - time.monotonic(), 0))
            for ready in ready_now:
                slot = waitables[ready]
                if slot.running is None:
                    continue
                result = self._receive(slot) if ready is slot.conn else self._lost(slot)
                if result is not None:
                    results.append(result)
            if not ready_now or time.monotonic() >= deadline:
                break
        return results

    def _receive(self, slot: _Slot) -> StepResult | None:
        try:
            message = slot.conn.recv()
        except (EOFError, OSError):
            return self._lost(slot)
        if isinstance(message, tuple) and message[0] == "started":
            _take_group(slot, message)
            return None
        assert isinstance(message, StepResult)
        slot.running = None
        slot.groups.clear()
        return message

    def _lost(self, slot: _Slot) -> StepResult | None:
        request = slot.running
        if request is None or slot.process.is_alive():
            return None
        sent = self._rest_of_pipe(slot)  # its last notes may not have been read: the groups it started, its result
        end_dead_worker(slot.process.pid, slot.groups, grace_s=1.0)
        exit_code = slot.process.exitcode
        slot.running = None  # its conn and sentinel may both be ready: report the loss once
        self._restart(slot)
        if sent is not None:
            return sent
        return StepResult(
            step_id=request.step_id,
            sha=request.sha,
            verdict=Verdict.ERROR,
            error_kind=ErrorKind.WORKER_LOST,
            detail=f"worker {slot.name} (pid {slot.process.pid}) died with exit code {exit_code} mid-step",
            log_path=request.log_path,
            worker=slot.name,
            node="localhost",
            gpus=slot.gpus,
        )

    @staticmethod
    def _rest_of_pipe(slot: _Slot) -> StepResult | None:
        """Take what a dead worker sent that is still unread: process groups into slot.groups; its step's result."""
        result = None
        with contextlib.suppress(EOFError, OSError):
            while slot.conn.poll(0):
                message = slot.conn.recv()
                if isinstance(message, tuple) and message[0] == "started":
                    _take_group(slot, message)
                elif isinstance(message, StepResult):
                    result = message
        return result

    def cancel(self, step_id: int) -> None:
        for slot in self._slots:
            if slot.running is not None and slot.running.step_id == step_id:
                with contextlib.suppress(OSError):
                    slot.conn.send((_CANCEL, step_id))

    def abandon(self, step_id: int) -> None:
        """A step that never reported: its worker process is killed; poll sees it through the sentinel, kills the
        test's process group and starts a new process for the slot."""
        for slot in self._slots:
            if slot.running is not None and slot.running.step_id == step_id:
                slot.process.kill()

    def process_groups(self, step_ids: Collection[int] | None = None) -> list[ProcessGroup]:
        return sorted(
            group
            for slot in self._slots
            if slot.running is not None and (step_ids is None or slot.running.step_id in step_ids)
            for group in slot.groups
        )

    def worker_pids(self) -> dict[str, int | None]:
        """The pid of each slot's worker process (for diagnostics and fault-injection tests)."""
        return {slot.name: slot.process.pid for slot in self._slots}

    def close(self) -> None:
        end_groups([group for slot in self._slots for group in slot.groups], grace_s=1.0)  # all at once: one wait
        for slot in self._slots:
            with contextlib.suppress(OSError):
                slot.conn.send(_STOP)
        for slot in self._slots:
            slot.process.join(timeout=10)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()
            slot.conn.close()
        self._slots = []
        self._leases.release()
