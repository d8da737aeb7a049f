"""SlotPool: one real executor shared by several coordinators, each through an Executor view of its own.

The pool owns the executor. Each coordinator (a thread of `bisect serve`) gets a `PoolView`: its `poll` returns
only its own steps' results and its `free_workers` only as many slots as its fair share allows. A view is named by
its `ViewKey`: a bisect's job, or the rerun beside it.

Fair share over the R registered views and S slots: every view is entitled to one slot, and the S - R others go
by priority weight (priority + 1, at least 1; largest remainders first). The server runs at most S jobs at once, but
reruns add views: while R > S only S views are promised a slot, the jobs' first, then the reruns by priority, oldest
first; the other reruns are promised none (they wait, preempt nobody, and take a slot once promised one or one is
free that nobody asks for). So the promises never add up to more than S. A view may also borrow slots that nobody
asks for now: those nobody is owed, and those owed to an idle view (nothing out, no worker reserved, no result
unread, and no call to the pool for `idle_after_s`: a coordinator explaining its culprit, say). Borrowed slots come
back when their steps end, or sooner by preemption once their owner asks again holding none.

Preemption: when a view holding no slot waits for its first one and no slot is free, the pool cancels the newest
preemptible step (StepRequest.preemptible: a search run, an endpoint check or a probe; never a confirmation, a
reference or a side run, which the coordinator marks as not preemptible) of the view most over its share, at most
one per waiting view at a time. A view's only slot is never taken: a victim holds more than its share, so at least
two (a view promised none, a rerun, runs no preemptible step).
The step's result comes back to its coordinator as CANCELLED, its detail starting with PREEMPTED (not a verdict,
not a failure of the commit or the worker: the search takes it as not run); the freed slot goes to the views
owed one, as any freed slot does.

Placement: the coordinator pins every step to a worker it got from `free_workers()`. So that two views never
pin one worker, `free_workers()` reserves the workers it returns for its view until that view's next `poll`
(the coordinator asks, submits, then polls); other views do not see them meanwhile. A view with no step out
waits in `free_workers()` for its first slot (one a borrower's step frees), so its coordinator never sees
"no worker free and nothing in flight"; `interrupt(bisect_id)` ends that wait for a cancelled bisect and its rerun.

Stopping: `stop()` makes every view's `poll` and `submit` raise the pool's stop error (the server passes
`bisector.runner.stopping.StopRequested(SIGTERM)`: a coordinator treats it as a stop signal, in any thread, and stores
its running steps as interrupted).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from bisector.vocab.domain import StepResult, Verdict
from bisector.vocab.errors import ExecutorError
from bisector.vocab.processes import ProcessGroup
from bisector.workers.executor import Assignment, Executor, StepRequest

if TYPE_CHECKING:
    from bisector.workers.build_ahead import AheadBuilder

PUMP_POLL_S = 0.01  # how long the pump waits on the real executor while holding its lock
PUMP_IDLE_S = 0.005  # the pump's pause between polls, so that submits get the lock
FIRST_SLOT_WAIT_S = 0.5  # a view waiting for its first slot looks again at least this often
IDLE_AFTER_S = 10.0  # a view out of the pool this long (its coordinator calls it every round) lends its owed slots
PREEMPTED = "preempted"  # the first word of a preempted step's detail
RERUN_OF = "the rerun of bisect"  # how a rerun's view is named (in a preempted step's detail)


class ViewKey(NamedTuple):
    """Whose view: a bisect's job, or the rerun beside it (a bisect has at most one of each)."""

    bisect_id: int
    rerun: bool = False

    def __str__(self) -> str:
        return f"{RERUN_OF} {self.bisect_id}" if self.rerun else f"bisect {self.bisect_id}"


class SlotPool:
    """Thread-safe: coordinators in several threads use it through their views."""

    def __init__(
        self, executor: Executor, stop_error: Callable[[], BaseException], idle_after_s: float = IDLE_AFTER_S
    ) -> None:
        """stop_error: what a view raises in its coordinator once the pool stops; idle_after_s: how long a view
        holding nothing stays out of the pool before the slots it is owed are lent."""
        self._executor = executor
        self._stop_error = stop_error
        self._idle_after_s = idle_after_s
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # slots freed, reservations released, views gone, stop
        self._views: dict[ViewKey, PoolView] = {}
        self._owner: dict[int, PoolView] = {}  # step id -> the view that submitted it
        self._reserved: dict[str, PoolView] = {}  # worker -> the view it is reserved for
        self._preemptible: set[int] = set()  # running steps the pool may cancel for a view holding none
        self._preempted: dict[int, ViewKey] = {}  # step id -> the view its slot is being freed for
        self._stopping = threading.Event()
        self._closed = False
        self._pump = threading.Thread(target=self._run_pump, name="slot-pool-pump", daemon=True)
        self._pump.start()

    @property
    def slots(self) -> int:
        return self._executor.slots

    def view(self, bisect_id: int, priority: int = 0, *, rerun: bool = False) -> PoolView:
        """A new view for one coordinator (of the bisect's job, or of its rerun), registered until it closes."""
        key = ViewKey(bisect_id, rerun)
        with self._lock:
            if self._stopping.is_set():
                raise self._stop()
            if key in self._views:
                raise ExecutorError(f"{key} already has a view of the pool")
            view = PoolView(self, key, priority)
            self._views[key] = view
            return view

    def busy(self) -> int:
        """Slots running a step now."""
        with self._lock:
            return self._executor.slots - len(self._executor.free_workers())

    def shares(self) -> dict[ViewKey, int]:
        """Each registered view's entitlement (view key -> slots)."""
        with self._lock:
            return self._shares()

    def stop(self) -> None:
        """Make every view raise a stop in its coordinator (the server is shutting down)."""
        self._stopping.set()
        with self._lock:
            self._changed.notify_all()

    def interrupt(self, bisect_id: int, *, rerun_only: bool = False) -> None:
        """The bisect (or only its rerun) was cancelled: from now on its views, its job's and its rerun's (or the
        rerun's alone), are offered no worker (their coordinators, waiting for a first slot, go on to see the
        cancel). An ended bisect's job may still be running its explanation through its view: rerun_only then."""
        keys = [ViewKey(bisect_id, rerun=True)] if rerun_only else [ViewKey(bisect_id), ViewKey(bisect_id, rerun=True)]
        with self._lock:
            for key in keys:
                if (view := self._views.get(key)) is not None:
                    view.interrupted = True
            self._changed.notify_all()

    def close(self) -> None:
        self.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pump.join(timeout=10)
        self._executor.close()

    # --- used by the views, under the lock ---------------------------------------------------------------------

    def _stop(self) -> BaseException:
        return self._stop_error()

    def _shares(self) -> dict[ViewKey, int]:
        views = list(self._views.values())
        if not views:
            return {}
        slots = self._executor.slots
        promised = sorted(views, key=lambda view: (view.key.rerun, -view.priority))[:slots]  # stable: oldest first
        shares = {view.key: 0 for view in views} | {view.key: 1 for view in promised}
        spare = max(slots - len(views), 0)
        weights = {view.key: max(view.priority + 1, 1) for view in views}
        total = sum(weights.values())
        exact = {key: spare * weight / total for key, weight in weights.items()}
        for key, amount in exact.items():
            shares[key] += int(amount)
        left = spare - sum(int(amount) for amount in exact.values())
        by_remainder = sorted(exact, key=lambda key: (exact[key] - int(exact[key]), weights[key]), reverse=True)
        for key in by_remainder[:left]:
            shares[key] += 1
        return shares

    def _held(self, view: PoolView) -> int:
        return sum(1 for owner in self._owner.values() if owner is view)

    def _idle(self, view: PoolView) -> bool:
        """Whether view is not asking for its slots: nothing out, none reserved, no result unread, and its
        coordinator out of the pool for idle_after_s."""
        quiet = not view.calls and time.monotonic() - view.left_at >= self._idle_after_s
        return quiet and view.inbox.empty() and not self._held(view) and not self._reservations(view)

    def _free_for(self, view: PoolView) -> list[str]:
        """Free workers view may use now, reserved for it until its next poll (a view's reservation only grows
        until then, so that the coordinator's several asks within one round agree). A view with no step out waits
        here for its first slot: a coordinator that finds no free worker and nothing in flight would conclude
        that nothing is left to test."""
        while True:
            if self._stopping.is_set() or view.interrupted or self._views.get(view.key) is not view:
                return []  # stopping, cancelled, or closed (maybe by another thread, while it waited)
            chosen = self._grow_reservation(view)
            if chosen or self._held(view) or not view.inbox.empty():
                return chosen
            self._preempt_for(view)
            self._changed.wait(FIRST_SLOT_WAIT_S)

    def _preempt_for(self, view: PoolView) -> None:
        """view holds no slot and got none: unless it is promised none, a slot is free (a reservation ends soon) or
        one is already being freed for it, cancel the newest preemptible step of the view most over its share."""
        shares = self._shares()
        if not shares[view.key] or view.key in self._preempted.values() or self._executor.free_workers():
            return
        excess: dict[ViewKey, int] = {}
        for other in self._views.values():
            held = self._held(other) - sum(1 for s, o in self._owner.items() if o is other and s in self._preempted)
            if other is not view and held > shares[other.key]:
                excess[other.key] = held - shares[other.key]
        for key in sorted(excess, key=lambda k: excess[k], reverse=True):
            victim = self._views[key]
            steps = [
                s for s, o in self._owner.items() if o is victim and s in self._preemptible and s not in self._preempted
            ]
            if steps:
                self._preempted[max(steps)] = view.key
                self._executor.cancel(max(steps))
                return

    def _grow_reservation(self, view: PoolView) -> list[str]:
        shares = self._shares()
        mine = [w for w, owner in self._reserved.items() if owner is view]
        available = [w for w in self._executor.free_workers() if w not in self._reserved]
        needed_by_others = sum(
            max(shares[other.key] - self._held(other) - self._reservations(other), 0)
            for other in self._views.values()
            if other is not view and not self._idle(other)
        )
        own_deficit = max(shares.get(view.key, 1) - self._held(view) - len(mine), 0)
        borrow = max(len(available) - needed_by_others - own_deficit, 0)
        added = available[: own_deficit + borrow]
        for worker in added:
            self._reserved[worker] = view
        return mine + added

    def _reservations(self, view: PoolView) -> int:
        return sum(1 for owner in self._reserved.values() if owner is view)

    def _release(self, view: PoolView) -> None:
        for worker in [w for w, owner in self._reserved.items() if owner is view]:
            del self._reserved[worker]
        self._changed.notify_all()

    def _submit(self, view: PoolView, request: StepRequest) -> Assignment:
        if self._stopping.is_set():
            raise self._stop()
        worker = request.pin_worker
        if worker and self._reserved.get(worker, view) is not view:
            raise ExecutorError(f"worker {worker} is reserved for another bisect")
        assignment = self._executor.submit(request)
        self._reserved.pop(assignment.worker, None)
        self._owner[request.step_id] = view
        if request.preemptible:
            self._preemptible.add(request.step_id)
        return assignment

    def _cancel(self, view: PoolView, step_id: int, *, abandon: bool = False) -> None:
        if self._owner.get(step_id) is not view:
            return
        if abandon:
            self._executor.abandon(step_id)
        else:
            self._executor.cancel(step_id)

    def _close_view(self, view: PoolView) -> None:
        """The view's coordinator is done: its steps still running are cancelled; their results are dropped."""
        self._release(view)
        for step_id, owner in list(self._owner.items()):
            if owner is view:
                self._executor.cancel(step_id)
                owner.orphaned.add(step_id)
        self._views.pop(view.key, None)
        self._changed.notify_all()

    def _ended(self, result: StepResult) -> StepResult:
        """A step's result as its coordinator gets it: a step cancelled by preemption says so."""
        self._preemptible.discard(result.step_id)
        beneficiary = self._preempted.pop(result.step_id, None)
        if beneficiary is None or result.verdict is not Verdict.CANCELLED:
            return result
        why = f"{PREEMPTED}: its slot went to {beneficiary}, which held none (not a verdict; it may run again)"
        return replace(result, detail=why)

    # --- the pump: the one thread that polls the real executor ------------------------------------------------

    def _run_pump(self) -> None:
        while not self._closed:
            with self._lock:
                if self._closed:
                    return
                results = self._executor.poll(PUMP_POLL_S)
                for result in map(self._ended, results):
                    owner = self._owner.pop(result.step_id, None)
                    if owner is not None and result.step_id not in owner.orphaned:
                        owner.inbox.put(result)
                if results:
                    self._changed.notify_all()
            time.sleep(PUMP_IDLE_S)


class PoolView(Executor):
    """One coordinator's executor: the pool's workers, limited to its share, and only its own results."""

    def __init__(self, pool: SlotPool, key: ViewKey, priority: int) -> None:
        self._pool = pool
        self.key = key
        self.priority = priority
        self.inbox: queue.Queue[StepResult] = queue.Queue()
        self.orphaned: set[int] = set()
        self.interrupted = False  # its bisect was cancelled: offered no more workers
        self.calls = 0  # calls of its coordinator in the pool now (free_workers or poll, maybe waiting)
        self.left_at = time.monotonic()  # when its coordinator's last call returned
        self._closed = False

    @property
    def slots(self) -> int:
        with self._pool._lock:
            return max(self._pool._shares().get(self.key, 1), 1)

    def worker_names(self) -> list[str]:
        with self._pool._lock:
            return self._pool._executor.worker_names()

    def free_workers(self) -> list[str]:
        with self._pool._lock, self._asking():
            return self._pool._free_for(self)

    def ahead_builder(self, limit: int, guard: AbstractContextManager[object] | None = None) -> AheadBuilder[Any]:
        """Where the pool's executor builds (this host, or the Ray slots' nodes), its state read under the pool's
        lock."""
        return self._pool._executor.ahead_builder(limit, self._pool._lock)

    def submit(self, request: StepRequest) -> Assignment:
        with self._pool._lock:
            return self._pool._submit(self, request)

    def poll(self, timeout_s: float) -> list[StepResult]:
        with self._asking():
            return self._poll(timeout_s)

    def _poll(self, timeout_s: float) -> list[StepResult]:
        with self._pool._lock:
            self._pool._release(self)
        if self._pool._stopping.is_set():
            raise self._pool._stop()
        results: list[StepResult] = []
        try:
            results.append(self.inbox.get(timeout=max(timeout_s, 0.0)))
        except queue.Empty:
            return results
        while True:
            try:
                results.append(self.inbox.get_nowait())
            except queue.Empty:
                return results

    @contextmanager
    def _asking(self) -> Iterator[None]:
        """Its coordinator is in the pool: not idle."""
        with self._pool._lock:
            self.calls += 1
        try:
            yield
        finally:
            with self._pool._lock:
                self.left_at = time.monotonic()
                self.calls -= 1

    def process_groups(self, step_ids: Collection[int] | None = None) -> list[ProcessGroup]:
        """Those of its own running steps (of step_ids alone, where given), as the pool's executor reports them."""
        with self._pool._lock:
            own = [s for s, owner in self._pool._owner.items() if owner is self and (step_ids is None or s in step_ids)]
            return self._pool._executor.process_groups(own) if own else []

    def cancel(self, step_id: int) -> None:
        with self._pool._lock:
            self._pool._cancel(self, step_id)

    def abandon(self, step_id: int) -> None:
        with self._pool._lock:
            self._pool._cancel(self, step_id, abandon=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._pool._lock:
            self._pool._close_view(self)
