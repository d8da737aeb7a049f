"""The job scheduler of `bisect serve`: coordinators in threads over one SlotPool, and the queue in the store.

At most `pool.slots` jobs run at once (each keeps at least one slot); the others wait, highest priority first,
then oldest. A job's thread runs `Coordinator.resume`, which serves a queued bisect (no steps yet) and one that
was running when a previous server died (its running steps re-queued, its finished steps kept) alike.

Stopping the server stops the pool: each coordinator sees StopRequested in its thread, stores its running steps
as interrupted and returns; its job stays `running` for the next server. A cancel (`DELETE /api/bisects/{id}`
or `bisect cancel`) is `cancel_bisect` (bisector/runner/coordinator.py): the bisect is marked cancelled in the store,
where its coordinator looks every half second, and its reruns in any process (`bisect run-at --bisect`) are revoked.

A rerun (`Coordinator.rerun`, one step's commit run again, stored beside the bisect) runs in a thread of its own over
a pool view of its own (the rerun's, beside its bisect's job's): it waits for a slot as a job that holds none does,
and the server's stop ends it as it ends the jobs. One rerun per bisect at a time. A cancel ends the bisect's rerun
too (one of a bisect that has ended as well): a waiting rerun never starts, a running one's step is stopped and
stored as cancelled. The cancel answers once the bisect's reruns have ended (or RERUN_STOP_WAIT_S passed), naming a
rerun only if the cancel ended it: not one that stored its last result first.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from bisector.core.spec import BisectSpec
from bisector.db.jobs import JobQueue, JobRecord, JobState
from bisector.db.store import Store
from bisector.runner.coordinator import CancelOutcome, Coordinator, cancel_bisect
from bisector.runner.side_runs import SideRunsCancelledError
from bisector.runner.stopping import StopRequested
from bisector.vocab.domain import RERUN_STOP_WAIT_S, BisectStatus
from bisector.vocab.errors import BisectError, StateError
from bisector.workers.executor import Executor
from bisector.workers.pool import SlotPool

SCHEDULE_INTERVAL_S = 0.5  # how often the queue is read when nothing woke the scheduler
LEASE_RETRY_S = 30.0  # a job whose bisect another live coordinator holds is tried again this much later

CoordinatorFactory = Callable[[Store, Callable[[BisectSpec], Executor]], Coordinator]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Rerun:
    """A bisect's rerun in the background: its thread, the cancel it heeds, and whether that cancel ended it."""

    sha: str
    thread: threading.Thread
    cancelled: threading.Event
    stopped: threading.Event


def _stopped_by_cancel(rerun: Rerun, wait_s: float) -> bool:
    """Whether the rerun, its cancel asked, ended by it (within wait_s) rather than by itself."""
    rerun.thread.join(wait_s)
    return rerun.stopped.is_set()


def default_coordinator(store: Store, executor_factory: Callable[[BisectSpec], Executor]) -> Coordinator:
    return Coordinator(store, executor_factory)


class JobScheduler:
    def __init__(
        self,
        store: Store,
        pool: SlotPool,
        make_coordinator: CoordinatorFactory = default_coordinator,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.store = store
        self.queue = JobQueue(store)
        self.pool = pool
        self.make_coordinator = make_coordinator
        self.now = now
        self._threads: dict[int, threading.Thread] = {}
        self._reruns: dict[int, Rerun] = {}  # bisect -> its running rerun
        self._not_before: dict[int, float] = {}  # job -> monotonic time before which it is not tried again
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._interrupted_steps = 0  # running steps the coordinators stored as interrupted when the server stopped
        self._loop = threading.Thread(target=self._run_loop, name="job-scheduler", daemon=True)

    def start(self) -> None:
        """Queue the bisects a previous server stored but died before queueing (a duplicate of a job: cancelled),
        then resume the running jobs and start queued ones (this and every later round)."""
        stranded = self.queue.queue_stranded(self.now())
        for done, ids in (("queued", stranded.queued), ("cancelled as duplicates", stranded.cancelled)):
            if ids:
                listed = ", ".join(str(i) for i in ids)
                why = "stored by a server that stopped before queueing them"
                print(f"bisect serve: {done} bisect(s) {listed}, {why}", file=sys.stderr)
        self._loop.start()

    def wake(self) -> None:
        self._wake.set()

    def add(
        self, bisect_id: int, priority: int, source: str, owner: str, submission_key: str | None = None
    ) -> JobRecord | None:
        """JobQueue.add: None once queued; the job that holds the owner's submission key already, if one does."""
        holder = self.queue.add(bisect_id, priority, source, self.now(), owner, submission_key)
        self.wake()
        return holder

    def rerun(self, job: JobRecord, sha: str) -> None:
        """Run the job's bisect's build and test at sha once more, in the background (a rerun step of the bisect).
        StateError while the bisect's previous rerun runs."""
        bisect_id = job.bisect_id
        with self._lock:
            if self._stopping.is_set():
                raise StateError("the server is stopping")
            if bisect_id in self._reruns:
                raise StateError(f"bisect {bisect_id} has a rerun running: one at a time")
            cancelled, stopped = threading.Event(), threading.Event()
            args = (bisect_id, sha, job.priority, cancelled, stopped)
            thread = threading.Thread(target=self._run_rerun, args=args, name=f"rerun-{bisect_id}")
            self._reruns[bisect_id] = Rerun(sha, thread, cancelled, stopped)
            thread.start()

    def reruns(self) -> list[int]:
        """The bisects whose rerun runs now (a rerun's thread is let go when it ends)."""
        with self._lock:
            return list(self._reruns)

    def cancel(self, job: JobRecord, wait_s: float = RERUN_STOP_WAIT_S) -> CancelOutcome:
        """`cancel_bisect` (the bisect and its reruns in every process; of a bisect that has ended, its reruns), and
        what only this server stops: the job's wait for a slot, and its rerun thread, waiting or running, whose end
        the cancel waits for (up to wait_s) and names only if the cancel ended it (one still running then is named
        asked to stop through its registration in the store).
        StateError when the bisect has ended and no rerun of it runs."""
        bisect_id = job.bisect_id
        with self._lock:
            rerun = self._reruns.get(bisect_id)
        if rerun is not None:
            rerun.cancelled.set()  # before the store's revocation: a rerun not yet registered there never starts

        def stop_here(ended: bool) -> tuple[str, ...]:
            # A coordinator still waiting for its first slot sees the cancel now; an ended bisect's job keeps its
            # view (it may still be explaining its culprit).
            self.pool.interrupt(bisect_id, rerun_only=ended)
            if job.state is JobState.QUEUED:
                with self._lock:
                    if bisect_id not in self._threads:
                        self.queue.mark_done(bisect_id, self.now())
            self.wake()
            return (rerun.sha,) if rerun is not None and _stopped_by_cancel(rerun, wait_s) else ()

        return cancel_bisect(self.store, bisect_id, self.now, stop_here=stop_here, wait_s=wait_s)

    def running(self) -> list[int]:
        with self._lock:
            return [job for job, thread in self._threads.items() if thread.is_alive()]

    def stop(self, timeout_s: float = 60.0) -> int:
        """Stop every coordinator (their running steps stored as interrupted) and the scheduling loop. How many
        steps they stored as interrupted."""
        self._stopping.set()
        self.pool.stop()
        self._wake.set()
        with contextlib.suppress(RuntimeError):
            self._loop.join(timeout_s)
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = [*self._threads.values(), *(rerun.thread for rerun in self._reruns.values())]
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        with self._lock:
            return self._interrupted_steps

    # --- the loop ----------------------------------------------------------------------------------------------

    def _run_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._schedule()
            except BisectError as exc:  # the store was unreachable for a moment: try again next round
                print(f"bisect serve: scheduling: {exc}", file=sys.stderr, flush=True)
            self._wake.wait(SCHEDULE_INTERVAL_S)
            self._wake.clear()

    def _schedule(self) -> None:
        with self._lock:
            self._threads = {job: thread for job, thread in self._threads.items() if thread.is_alive()}
            free = self.pool.slots - len(self._threads)
            for job in self.queue.open_jobs():
                if free <= 0 or self._stopping.is_set():
                    return
                if job.bisect_id in self._threads or self._not_before.get(job.bisect_id, 0.0) > time.monotonic():
                    continue
                if job.state is JobState.QUEUED and self.store.get_bisect(job.bisect_id).status.is_terminal():
                    self.queue.mark_done(job.bisect_id, self.now())  # cancelled while it waited
                    continue
                thread = threading.Thread(target=self._run_job, args=(job,), name=f"bisect-{job.bisect_id}")
                self._threads[job.bisect_id] = thread
                free -= 1
                thread.start()

    def _run_job(self, job: JobRecord) -> None:
        bisect_id = job.bisect_id

        def view(spec: BisectSpec) -> Executor:
            return self.pool.view(bisect_id, job.priority)

        try:
            self.queue.mark_running(bisect_id, self.now())
            self.make_coordinator(self.store, view).resume(bisect_id)
        except StopRequested as stop:  # the server stops: the job stays running, for the next server to resume
            with self._lock:
                self._interrupted_steps += stop.interrupted_steps
            return
        except StateError as exc:
            if not self._ended(bisect_id):  # another coordinator holds the lease: try again later
                print(f"bisect serve: bisect {bisect_id}: {exc}", file=sys.stderr, flush=True)
                self._not_before[bisect_id] = time.monotonic() + LEASE_RETRY_S
                return
        except Exception as exc:  # the job fails; the server serves on
            detail = str(exc) if isinstance(exc, BisectError) else f"internal error: {exc!r}"
            if not isinstance(exc, BisectError):
                traceback.print_exc(file=sys.stderr)
            with contextlib.suppress(BisectError):
                self.store.set_status(
                    bisect_id, BisectStatus.FAILED, message=f"the server's coordinator failed: {detail}"
                )
        with contextlib.suppress(BisectError):
            # A mark or a resume may set the bisect running again while its coordinator returns: the job stays open
            # (at the head of the queue) for the next round to resume. The second read catches one that came between
            # the first and mark_done, whose own requeue found the job still open.
            if (
                not self._is_running_again(bisect_id)
                and self.queue.mark_done(bisect_id, self.now())
                and self._is_running_again(bisect_id)
            ):
                self.queue.requeue(bisect_id)
        self.wake()

    def reopened(self, bisect_id: int) -> bool:
        """A mark reopened the bisect, or a resume ended its pause (set it running again): its job is queued again
        once its coordinator has returned (at once if it had: True; _run_job otherwise, which leaves it open)."""
        requeued = self.queue.requeue(bisect_id)  # False too where a local mark of its store queued it already
        self.wake()
        return requeued

    def _run_rerun(
        self, bisect_id: int, sha: str, priority: int, cancelled: threading.Event, stopped: threading.Event
    ) -> None:
        """stopped: set when the cancel ended it (before or while its step ran)."""

        def view(spec: BisectSpec) -> Executor:
            opened = self.pool.view(bisect_id, priority, rerun=True)
            if cancelled.is_set():  # the cancel's interrupt came before the view was there
                self.pool.interrupt(bisect_id, rerun_only=True)
            return opened

        try:
            self.make_coordinator(self.store, view).rerun(bisect_id, sha, cancelled=cancelled.is_set)
        except SideRunsCancelledError:
            stopped.set()
        except StopRequested:
            return
        except Exception as exc:  # the rerun fails; the server serves on
            if not isinstance(exc, BisectError):
                traceback.print_exc(file=sys.stderr)
            print(f"bisect serve: bisect {bisect_id}: the rerun of {sha[:12]} failed: {exc}", file=sys.stderr)
        finally:
            with self._lock:
                del self._reruns[bisect_id]

    def _is_running_again(self, bisect_id: int) -> bool:
        """Whether the bisect runs on after its coordinator returned (a coordinator returns once it ended, or
        paused, unless a mark reopened it)."""
        return self.store.get_bisect(bisect_id).status is BisectStatus.RUNNING

    def _ended(self, bisect_id: int) -> bool:
        try:
            return self.store.get_bisect(bisect_id).status.is_terminal()
        except BisectError:
            return True
