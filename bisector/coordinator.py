"""The Coordinator drives one bisect: verify the endpoints, ask the strategy, run steps, record facts.

Every fact goes to the store when it happens, so a coordinator killed at any moment can be replaced by
`bisect resume ID`, which rebuilds its state from the stored steps alone.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from bisector.confirm import Confirmation, ConfirmStatus
from bisector.judging import RESULT_VERDICTS, UNTESTED, CommitView, Judge
from bisector.options import StrategyName
from bisector.ownership import HEARTBEAT_S, LEASE_TTL_S, Lease
from bisector.progress import Progress, ProgressObserver, SilentObserver
from bisector.spec import BisectSpec
from bisector.stopping import StopRequested
from bisector.strategies import KArySearch, OutcomeKind, SearchState, Strategy, estimated_steps_left
from bisector.strategies.noisy import is_consistent
from bisector.strategies.select import choose_strategy
from db.store import NewStep, Store
from vocab.domain import (
    BisectRecord,
    BisectStatus,
    Commit,
    ErrorKind,
    StepPurpose,
    StepRecord,
    StepResult,
    Verdict,
)
from vocab.errors import BisectError, StateError
from vocab.gitrepo import GitRepo
from vocab.paths import log_dir
from workers.executor import Assignment, Executor

POLL_INTERVAL_S = 0.5
CANCEL_CHECK_S = 0.5
PROGRESS_INTERVAL_S = 0.25
# The candidates are stored this long after the first steps went out: W checkouts and process starts at once
# fill a small host's cores, and 1000 rows written beside them delayed every first step by milliseconds.
CANDIDATES_DELAY_S = 0.05
REFERENCE_RUNS = 3  # runs of each endpoint on a suspect worker
DECIDED = (Verdict.GOOD, Verdict.BAD)  # the answers a reference run can give
# Failures of the harness, not of the commit: they never count against a commit or a worker.
HARNESS_KINDS = frozenset({ErrorKind.INTERRUPTED, ErrorKind.HARNESS, ErrorKind.DISK_FULL, ErrorKind.STALLED})
HARNESS_PAUSE_AFTER = 3  # harness failures in a row (no step result between) that pause the bisect
WATCHDOG_MIN_GRACE_S = 60.0  # a step's result may come this long after its timeout before the watchdog acts
ANALYSIS_PENDING, ANALYSIS_DONE = "pending", "done"  # bisects.extra["analysis"] of a found culprit

ExecutorFactory = Callable[[BisectSpec], Executor]
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def prepare_bisect(store: Store, spec: BisectSpec, now: Clock = utc_now) -> int:
    """Resolve and validate the range, then store the bisect and its candidates. Returns the new id."""
    return _prepare(store, spec, now)[0].id


def _prepare(
    store: Store, spec: BisectSpec, now: Clock, *, store_candidates: bool = True
) -> tuple[BisectRecord, list[Commit]]:
    """store_candidates=False: the caller stores them (the coordinator does, once its first steps are out).
    Returns the stored bisect as it is now, so that the caller need not read it back."""
    repo = GitRepo(spec.repo)
    good, bad = repo.resolve(spec.good), repo.resolve(spec.bad)
    candidates = repo.range_for_bisect(good, bad, spec.test.paths)  # --all-parents descends into bad merges later
    created, spec_json = now(), spec.to_json()
    bisect_id = store.create_bisect(str(repo.root), good, bad, spec_json, created)
    if store_candidates:
        store.add_candidates(bisect_id, candidates)
    record = BisectRecord(
        id=bisect_id, repo=str(repo.root), good=good, bad=bad, spec=spec_json, status=BisectStatus.RUNNING,
        created=created, finished=None, first_bad=None, last_good=None,
    )  # fmt: skip
    return record, candidates


def store_missing_candidates(store: Store, record: BisectRecord) -> bool:
    """List and store the candidates of a bisect whose coordinator stopped before it stored them (it does so
    once its first steps are under way), so that its report names every commit. Whether it stored them; not
    when they are there already, the repository is gone, or a running coordinator stored them meanwhile."""
    if store.candidates(record.id):
        return False
    try:
        paths = BisectSpec.from_json(record.spec).test.paths
        store.add_candidates(record.id, GitRepo(record.repo).range_for_bisect(record.good, record.bad, paths))
    except BisectError:
        return False
    return True


@dataclass
class _CommitHistory:
    """What the stored steps say about one commit."""

    steps: list[StepRecord] = field(default_factory=list)

    quarantined: frozenset[str] = frozenset()  # workers whose results no longer count

    def trusted(self) -> list[StepRecord]:
        return [s for s in self.steps if s.worker not in self.quarantined]

    def results(self) -> int:
        return sum(1 for s in self.trusted() if s.verdict in RESULT_VERDICTS or s.verdict is Verdict.SKIP)

    def _failures(self) -> list[StepRecord]:
        # A step the harness failed (the coordinator's death, a broken slot, a full disk, a worker that never
        # reported) says nothing about the commit or the worker.
        return [s for s in self.trusted() if s.verdict is Verdict.ERROR and s.error_kind not in HARNESS_KINDS]

    def errors(self) -> int:
        return len(self._failures())

    def failed_workers(self) -> frozenset[str]:
        return frozenset(s.worker for s in self._failures() if s.worker)


def _running_step(
    step_id: int,
    bisect_id: int,
    sha: str,
    attempt: int,
    assignment: Assignment,
    started: datetime,
    purpose: StepPurpose,
) -> StepRecord:
    """The coordinator's own copy of a step it just stored, so the loop need not read it back."""
    return StepRecord(
        id=step_id, bisect_id=bisect_id, sha=sha, attempt=attempt, worker=assignment.worker, node=assignment.node,
        gpus=assignment.gpus, started=started, finished=None, build_s=None, run_s=None, exit_code=None,
        verdict=None, samples=(), log_path="", error_kind=None, detail="", purpose=purpose,
    )  # fmt: skip


def _finished_step(step: StepRecord, result: StepResult, finished: datetime) -> StepRecord:
    return replace(
        step, finished=finished, build_s=result.build_s, run_s=result.run_s, exit_code=result.exit_code,
        verdict=result.verdict, samples=result.samples, log_path=result.log_path, error_kind=result.error_kind,
        detail=result.detail, worker=result.worker or step.worker, node=result.node or step.node,
        gpus=result.gpus or step.gpus,
    )  # fmt: skip


class Coordinator:
    def __init__(
        self,
        store: Store,
        executor_factory: ExecutorFactory,
        *,
        strategy: Strategy | None = None,
        observer: ProgressObserver | None = None,
        now: Clock = utc_now,
        poll_interval_s: float = POLL_INTERVAL_S,
        candidates_delay_s: float = CANDIDATES_DELAY_S,
        watchdog_grace_s: float | None = None,
        lease_ttl_s: float = LEASE_TTL_S,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        """watchdog_grace_s: how long after a step's timeout its result may come before the step is given up on
        (default: a quarter of the timeout, at least WATCHDOG_MIN_GRACE_S)."""
        self.store = store
        self.executor_factory = executor_factory
        self.strategy = strategy  # None: chosen as the bisect goes (kary, noisy once noise is expected or seen)
        self.observer = observer or SilentObserver()
        self.now = now
        self.poll_interval_s = poll_interval_s
        self.candidates_delay_s = candidates_delay_s
        self.watchdog_grace_s = watchdog_grace_s
        self.lease_ttl_s = lease_ttl_s
        self.heartbeat_s = heartbeat_s

    def start(self, spec: BisectSpec, executor: Executor | None = None) -> BisectRecord:
        """executor: one already started (its workers boot while the caller opens the store); closed here."""
        # The workers start while the range is listed and stored: their start-up is off the critical path.
        with executor or self.executor_factory(spec) as executor:
            record, candidates = _prepare(self.store, spec, self.now, store_candidates=False)
            with self._lease(record.id) as lease, self._stoppable(record.id):
                return self._run(record, executor, candidates, fresh=True, lease=lease)

    def _lease(self, bisect_id: int) -> Lease:
        return Lease(self.store, bisect_id, self.now, ttl_s=self.lease_ttl_s, heartbeat_s=self.heartbeat_s)

    @contextlib.contextmanager
    def _stoppable(self, bisect_id: int) -> Iterator[None]:
        """A stop signal (bisector/stopping.py) while the bisect runs: its running steps are stored as
        interrupted, while this coordinator still holds the lease, so that `bisect resume` runs them again."""
        try:
            yield
        except StopRequested as stop:
            stop.bisect_id = bisect_id
            with contextlib.suppress(BisectError):
                stop.interrupted_steps = self.store.interrupt_running_steps(bisect_id, self.now())
            raise

    def resume(self, bisect_id: int, executor_overrides: Mapping[str, object] | None = None) -> BisectRecord:
        """Continue from the store; executor_overrides (executor, workers, ray_address, ...) move the rest of
        the bisect to other workers without changing what is tested. A found culprit whose explanation was
        cut short (analysis pending) gets its explanation; a paused bisect runs again."""
        record = self.store.get_bisect(bisect_id)
        analysis_pending = record.status is BisectStatus.FOUND and record.extra.get("analysis") == ANALYSIS_PENDING
        if record.status.is_terminal() and not analysis_pending:
            raise StateError(f"bisect {bisect_id} is already {record.status.value}; nothing to resume")
        spec = BisectSpec.from_json(record.spec)
        if executor_overrides:
            spec = spec.with_executor(executor_overrides)
            self.store.update_extra(bisect_id, resumed_with=dict(executor_overrides))
        # The lease first: the steps of a coordinator that is still alive must not be marked interrupted.
        with self._lease(bisect_id) as lease, self._stoppable(bisect_id):
            interrupted = self.store.interrupt_running_steps(bisect_id, self.now())
            if interrupted:
                self.observer.note(f"re-queued {interrupted} step(s) that were running when the coordinator stopped")
            if record.status is BisectStatus.PAUSED:
                self.store.set_status(bisect_id, BisectStatus.RUNNING, message="resumed after a pause")
            with self.executor_factory(spec) as executor:
                if analysis_pending:
                    final = self._finish_analysis(self.store.get_bisect(bisect_id), spec, executor)
                    self.observer.finished(final)
                    return final
                return self._run(self.store.get_bisect(bisect_id), executor, lease=lease)

    def rerun(
        self, bisect_id: int, rev: str, times: int = 1, executor_overrides: Mapping[str, object] | None = None
    ) -> list[StepResult]:
        """`bisect rerun`: the bisect's build and test at any commit, `times` runs, stored as rerun steps."""
        from bisector.side_runs import SideRun, SideRunner

        if times < 1:
            raise StateError(f"--times must be at least 1 (got {times})")
        record = self.store.get_bisect(bisect_id)
        spec = BisectSpec.from_json(record.spec)
        sha = GitRepo(record.repo).resolve(rev)
        spec = spec.with_executor(executor_overrides or {})
        with self.executor_factory(spec) as executor:
            runner = SideRunner(self.store, executor, bisect_id, spec, self.now, self.observer)
            return runner.run([SideRun(sha, StepPurpose.RERUN, label=f"rerun-{i}") for i in range(times)])

    def run(self, bisect_id: int) -> BisectRecord:
        spec = BisectSpec.from_json(self.store.get_bisect(bisect_id).spec)
        with self._lease(bisect_id) as lease, self._stoppable(bisect_id), self.executor_factory(spec) as executor:
            return self._run(self.store.get_bisect(bisect_id), executor, lease=lease)

    def _run(
        self,
        record: BisectRecord,
        executor: Executor,
        candidates: Sequence[Commit] | None = None,
        *,
        fresh: bool = False,
        lease: Lease | None = None,
    ) -> BisectRecord:
        """fresh: the bisect was just created from candidates (in memory, not stored yet); it has no steps, and the
        search stores the candidates right after its first steps are sent."""
        spec = BisectSpec.from_json(record.spec)
        _Search(self, record, spec, executor, candidates, fresh=fresh, lease=lease).run()
        final = self.store.get_bisect(record.id)
        if final.status is BisectStatus.FOUND and final.extra.get("analysis") == ANALYSIS_PENDING:
            final = self._finish_analysis(final, spec, executor)
        self.observer.finished(final)
        return final

    def _finish_analysis(self, record: BisectRecord, spec: BisectSpec, executor: Executor) -> BisectRecord:
        """The analysis phase of a found culprit: its verdict is stored and shown before the side runs start, and
        the phase is marked done only after them, so a coordinator stopped meanwhile leaves it for resume."""
        self.observer.note(f"{record.message}; now explaining it (--no-explain skips this)")
        self._analyse(record, spec, executor)
        self.store.update_extra(record.id, analysis=ANALYSIS_DONE)
        return self.store.get_bisect(record.id)

    def _analyse(self, record: BisectRecord, spec: BisectSpec, executor: Executor) -> None:
        """Explain and minimise a found culprit; a failure here is noted, the bisect's answer stands."""
        if not (spec.analysis.explain or spec.analysis.minimize):
            return  # not even the import: it takes a small host ~0.1 s
        from bisector.explain import explain_bisect, minimize_bisect

        steps = [(spec.analysis.explain, explain_bisect), (spec.analysis.minimize, minimize_bisect)]
        for wanted, analysis in steps:
            if not wanted:
                continue
            try:
                analysis(self.store, executor, record, self.now, self.observer)
            except BisectError as exc:
                self.observer.note(f"{analysis.__name__.split('_')[0]} failed: {exc}")

    def minimize(self, bisect_id: int) -> BisectRecord:
        """`bisect minimize ID`: ddmin over a found culprit's changes, on the bisect's executor."""
        from bisector.explain import minimize_bisect

        record = self.store.get_bisect(bisect_id)
        with self.executor_factory(BisectSpec.from_json(record.spec)) as executor:
            minimize_bisect(self.store, executor, record, self.now, self.observer)
        return self.store.get_bisect(bisect_id)


class _Search:
    """The state of one run of the coordinator loop over one bisect.

    The search runs over `order`: the positions (into the candidate list) of the commits being bisected,
    good end first. That is the first-parent chain; with --all-parents, a merge found bad is descended
    into: its merged branch's commits become the next order, between the merge's first parent (good)
    and the merge itself (bad), so the answer is a commit of that branch or, if the branch alone is
    good, the merge.
    """

    def __init__(
        self,
        owner: Coordinator,
        record: BisectRecord,
        spec: BisectSpec,
        executor: Executor,
        candidates: Sequence[Commit] | None = None,
        *,
        fresh: bool = False,
        lease: Lease | None = None,
    ) -> None:
        self.store = owner.store
        self.lease = lease
        self.fixed_strategy = owner.strategy
        self.observer = owner.observer
        self.now = owner.now
        self.poll_interval_s = owner.poll_interval_s
        self.candidates_delay_s = owner.candidates_delay_s
        self.record = record
        self.spec = spec
        self.executor = executor
        self.metric = spec.metric_spec()
        grace_s = owner.watchdog_grace_s
        if grace_s is None:
            grace_s = max(WATCHDOG_MIN_GRACE_S, spec.test.timeout_s / 4)
        self.step_deadline_s = spec.test.timeout_s + grace_s  # from sending a step to giving up on its result
        self.sent_at: dict[int, float] = {}  # step id -> monotonic time it was sent
        self.harness_failures: list[str] = []  # details of the harness failures since the last step result
        self.log_dir = log_dir(self.store.identity, record.id)
        candidates_stored = not fresh
        if candidates is None:
            candidates = self.store.candidates(record.id)
            if not candidates:  # a coordinator stopped before it stored them: list them again
                repo = GitRepo(record.repo)
                candidates, candidates_stored = repo.range_for_bisect(record.good, record.bad, spec.test.paths), False
        self.candidates: Sequence[Commit] = candidates
        self.candidates_stored = candidates_stored
        self.candidates_due: float | None = None  # monotonic time to store them, once the first steps are out
        self.position = {c.sha: c.position for c in self.candidates}
        self.judge = Judge(spec)
        self.history: dict[int, _CommitHistory] = defaultdict(_CommitHistory)
        stored_steps = [] if fresh else self.store.steps(record.id)
        for step in stored_steps:
            if step.purpose in (StepPurpose.SEARCH, StepPurpose.CONFIRM, StepPurpose.MANUAL):
                self.history[self.position[step.sha]].steps.append(step)
        self.manual_seen = max((s.id for s in stored_steps if s.purpose is StepPurpose.MANUAL), default=0)
        self.in_flight: dict[int, int] = {}  # step id -> position
        self.unwritten: list[tuple[StepResult, datetime, int]] = []  # results taken in, not yet stored
        self.views: dict[int, CommitView] = {}  # per position, cleared when its steps change
        self.cached_state: SearchState | None = None  # until the steps, the runs in flight or the order change
        self.flake_seen = False
        # A bisect created this moment cannot have been cancelled yet: its first check waits CANCEL_CHECK_S.
        self.last_cancel_check = time.monotonic() if fresh else -CANCEL_CHECK_S
        self.last_progress = -PROGRESS_INTERVAL_S
        self.confirming: tuple[int, int] | None = None  # (parent, first bad) positions under confirmation
        self.confirm_pairs: list[tuple[int, int]] = []  # pairs still to run, each (first, second) on one worker
        self.pair_second: dict[str, int] = {}  # worker -> the position its pair runs next
        self.quarantined: dict[str, str] = dict(record.extra.get("quarantined", {}))  # type: ignore[call-overload]
        for history in self.history.values():
            history.quarantined = frozenset(self.quarantined)
        self.history.default_factory = lambda: _CommitHistory(quarantined=frozenset(self.quarantined))
        self.reference_checked: set[str] = set(record.extra.get("reference_checked", []))  # type: ignore[call-overload]
        self.reference_queue: list[tuple[str, int, Verdict]] = []  # (worker, position, expected verdict)
        self.reference_in_flight: dict[int, tuple[str, int, Verdict]] = {}  # step id -> the same
        self.reference_answers: dict[str, list[bool]] = defaultdict(list)  # worker -> right/wrong per run
        self.restore_reference_checks(stored_steps)
        self.merge_phases: list[dict[str, object]] = list(record.extra.get("merge_phases", []))  # type: ignore[call-overload]
        self.set_order(self.current_order())

    def set_order(self, order: list[int]) -> None:
        self.order = order
        self.index_of = {position: index for index, position in enumerate(order)}
        self.cached_state = None

    def forget_views(self, position: int | None = None) -> None:
        """Drop what was derived from the steps of one commit (None: of every commit): its view and the state."""
        if position is None:
            self.views.clear()
        else:
            self.views.pop(position, None)
        self.cached_state = None

    def current_order(self) -> list[int]:
        if self.merge_phases:
            return [int(p) for p in self.merge_phases[-1]["order"]]  # type: ignore[attr-defined]
        return list(range(len(self.candidates)))

    # --- state (indexes into self.order) -------------------------------------------------------------------

    @property
    def last(self) -> int:
        return len(self.order) - 1

    def commit_at(self, index: int) -> Commit:
        return self.candidates[self.order[index]]

    def verdict(self, index: int) -> Verdict | None:
        return self.position_verdict(self.order[index])

    def view(self, position: int) -> CommitView:
        """What the commit's runs say (bisector/judging.py), cached until its steps change."""
        if position not in self.views:
            history = self.history.get(position)
            if history is None:
                return UNTESTED
            good_pos, bad_pos = 0, self.position[self.record.bad]
            endpoint = {good_pos: Verdict.GOOD, bad_pos: Verdict.BAD}.get(position)
            samples = (self.view(good_pos).samples, self.view(bad_pos).samples) if endpoint is None else ((), ())
            self.views[position] = self.judge.view(history.trusted(), endpoint=endpoint, endpoint_samples=samples)
        return self.views[position]

    def position_verdict(self, position: int) -> Verdict | None:
        """The commit's verdict for the search; an error past the retry budget counts as a skip."""
        history = self.history.get(position)
        if history is None:
            return None
        view = self.view(position)
        if view.verdict is None and not history.results() and history.errors() >= self.spec.search.max_attempts:
            return Verdict.SKIP
        return view.verdict

    def state(self) -> SearchState:
        """The search state over self.order; O(commits tested), not O(range). One pass of the loop asks for it
        several times (conclusion, strategy, cancels, probes): it is computed once per change."""
        if self.cached_state is None:
            self.cached_state = self.compute_state()
        return self.cached_state

    def compute_state(self) -> SearchState:
        tested = [p for p in self.history if p in self.index_of]
        verdicts = {self.index_of[p]: v for p in tested if (v := self.position_verdict(p)) is not None}
        observations = {
            self.index_of[p]: (view.goods, view.bads) for p in tested if (view := self.view(p)).goods + view.bads
        }
        # A commit waiting for a retry or more runs counts as in flight: the strategy must not probe it.
        waiting = [p for p in tested if self.needs_retry(p) or self.more_wanted(p)]
        running = frozenset(self.index_of[p] for p in [*self.in_flight.values(), *waiting] if p in self.index_of)
        return SearchState(len(self.order), verdicts, running, observations)

    def needs_retry(self, position: int) -> bool:
        history = self.history.get(position)
        if history is None or history.results():
            return False
        return 0 < history.errors() < self.spec.search.max_attempts

    def more_wanted(self, position: int) -> int:
        """Runs the commit still needs (repeats, adaptive repeats) beyond those in flight."""
        running = sum(1 for p in self.in_flight.values() if p == position)
        return max(self.view(position).more_runs - running, 0)

    def strategy(self) -> Strategy:
        if self.fixed_strategy is not None:
            return self.fixed_strategy
        if not self.flake_seen:
            observed = self.state().observed()
            if any(g and b for g, b in observed.values()) or not is_consistent(len(self.order), observed):
                self.flake_seen = True
                self.observer.note("flaky results seen (a commit both good and bad, or good after bad)")
        return choose_strategy(self.spec.search.strategy, self.spec.search.repeat_limit, self.flake_seen)

    @property
    def confirm_wanted(self) -> bool:
        if self.spec.search.confirm is not None:
            return self.spec.search.confirm
        return self.spec.search.strategy is StrategyName.NOISY or self.spec.search.repeat_limit > 1 or self.flake_seen

    # --- loop ----------------------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.loop()
        except BaseException:
            with contextlib.suppress(Exception):  # keep what came back; the original error is the one to see
                self.flush_results()
            raise
        self.flush_results()
        if not self.candidates_stored:  # cancelled before its first steps went out
            self.store_candidates()

    def store_candidates(self) -> None:
        """Written once the first steps are under way (candidates_delay_s): 1000 rows take milliseconds, and the
        endpoint checks and first probes need only the list in memory. A coordinator killed before this lists
        them again on resume."""
        self.store.add_candidates(self.record.id, self.candidates)
        self.candidates_stored = True
        count = len(self.candidates)
        self.observer.note(f"bisect {self.record.id}: {count} commits from good to bad; store {self.store.url}")

    def loop(self) -> None:
        while True:
            if self.concluded():
                self.cancel_all()
                return
            if set(self.executor.worker_names()) <= set(self.quarantined):
                self.cancel_all()
                self.finish(
                    BisectStatus.FAILED, message="every worker is quarantined: " + "; ".join(self.quarantined.values())
                )
                return
            self.submit_work()
            # Results that came back while the steps went out are taken first: sending their successors matters
            # more than writing (a round's results arrive within milliseconds). At most a round's worth waits.
            if len(self.unwritten) < self.executor.slots and self.take_results(0.0):
                continue
            self.flush_results()
            if self.cancelled():  # read from the store: after the next steps are out, not before
                self.cancel_all()
                return
            if self.lease is not None and self.lease.lost.is_set():
                self.cancel_all()
                raise StateError(f"another coordinator took bisect {self.record.id} over; this one stopped")
            if len(self.harness_failures) >= HARNESS_PAUSE_AFTER:
                self.pause()
                return
            if not self.candidates_stored:
                if self.candidates_due is None:
                    self.candidates_due = time.monotonic() + self.candidates_delay_s
                if not self.in_flight or time.monotonic() >= self.candidates_due:
                    self.store_candidates()
            if not self.in_flight:
                if not self.usable_workers():  # workers are (re)starting: wait for one
                    time.sleep(self.poll_interval_s)
                    continue
                self.finish(BisectStatus.FAILED, message="nothing left to test and no conclusion (internal error)")
                return
            self.report_progress()
            self.take_results(self.poll_timeout())
            self.give_up_stalled()

    def take_results(self, timeout_s: float) -> bool:
        """Record the results that come back within timeout_s; whether there were any. A result of a step the
        watchdog gave up on comes too late and is dropped: the step is stored as stalled."""
        results = [r for r in self.executor.poll(timeout_s) if r.step_id in self.in_flight]
        for result in results:
            self.record_result(result)
        return bool(results)

    def give_up_stalled(self) -> None:
        """The watchdog: a step whose result has not come step_deadline_s after it was sent (its timeout plus a
        grace) is stored as a stalled harness error, and its worker is abandoned (executors replace it)."""
        now = time.monotonic()
        for step_id, sent in list(self.sent_at.items()):
            if now - sent <= self.step_deadline_s or step_id not in self.in_flight:
                continue
            self.executor.abandon(step_id)
            sha = self.candidates[self.in_flight[step_id]].sha
            detail = (
                f"no result {self.step_deadline_s:.0f} s after the step was sent (its timeout is "
                f"{self.spec.test.timeout_s:g} s): the worker was given up on"
            )
            self.record_result(StepResult(step_id, sha, Verdict.ERROR, error_kind=ErrorKind.STALLED, detail=detail))

    def pause(self) -> None:
        """The harness failed HARNESS_PAUSE_AFTER times in a row: stop, stored as paused, for a person to fix it."""
        self.cancel_all()
        count, last = len(self.harness_failures), self.harness_failures[-1]
        self.flush_results()
        message = (
            f"paused: the test harness failed {count} times in a row, never the commits (last: {last}); "
            f"fix it, then `bisect resume {self.record.id}`"
        )
        with contextlib.suppress(StateError):
            self.store.set_status(self.record.id, BisectStatus.PAUSED, message=message)
        self.observer.note(message)

    def poll_timeout(self) -> float:
        if self.candidates_stored or self.candidates_due is None:
            return self.poll_interval_s
        return min(self.poll_interval_s, max(self.candidates_due - time.monotonic(), 0.0))

    def cancelled(self) -> bool:
        """Whether `bisect cancel` marked the bisect; read from the store at most every CANCEL_CHECK_S."""
        now = time.monotonic()
        if now - self.last_cancel_check < CANCEL_CHECK_S:
            return False
        self.last_cancel_check = now
        self.take_manual_verdicts()
        return self.store.get_bisect(self.record.id).status is BisectStatus.CANCELLED

    def take_manual_verdicts(self) -> None:
        """Verdicts a person stored (`bisect mark`) while the search runs join their commits' histories, where
        they decide the commit (bisector/judging.py)."""
        for step in self.store.manual_steps(self.record.id, after_id=self.manual_seen):
            self.manual_seen = step.id
            if (position := self.position.get(step.sha)) is not None:
                self.history[position].steps.append(step)
                self.forget_views()

    def concluded(self) -> bool:
        """Finish the bisect if the endpoints or the strategy settle it."""
        good_end, bad_end = self.verdict(0), self.verdict(self.last)
        if good_end is Verdict.SKIP or bad_end is Verdict.SKIP:
            which, index = ("good", 0) if good_end is Verdict.SKIP else ("bad", self.last)
            self.finish(
                BisectStatus.FAILED,
                message=f"the {which} endpoint {self.commit_at(index).sha[:12]} cannot be tested: "
                f"{self.last_detail(index)}",
            )
            return True
        if good_end is Verdict.BAD or bad_end is Verdict.GOOD:
            self.finish(BisectStatus.ENDPOINTS_MISMATCH, message=self.mismatch_message(good_end, bad_end))
            return True
        if good_end is None or bad_end is None:
            return False
        if self.judge.metric.comparative and not self.endpoints_differ():
            return True
        state = self.state()
        outcome = self.strategy().outcome(state)
        if outcome is None:
            return False
        first_bad, last_good = self.commit_at(outcome.first_bad), self.commit_at(outcome.last_good)
        if outcome.kind is OutcomeKind.FOUND and self.descend_into_merge(first_bad):
            return False
        confirmed = ""
        if outcome.kind is OutcomeKind.FOUND and self.confirm_wanted:
            confirmation = self.confirmation(last_good.position, first_bad.position)
            if confirmation is None:
                return False
            self.update_extra(confirmation=confirmation.to_json())
            if confirmation.status is ConfirmStatus.NOT_REPRODUCIBLE:
                self.finish(
                    BisectStatus.NOT_REPRODUCIBLE,
                    first_bad=first_bad.sha,
                    last_good=last_good.sha,
                    message=f"{first_bad.sha[:12]} looked like the first bad commit, but re-running it against its "
                    f"parent did not reproduce the difference ({confirmation.reason}): flaky, not a culprit",
                )
                return True
            confirmed = confirmation.reason
        status = BisectStatus.FOUND if outcome.kind is OutcomeKind.FOUND else BisectStatus.AMBIGUOUS
        if status is BisectStatus.FOUND:
            message = f"first bad commit: {first_bad.sha[:12]} {first_bad.subject}"
        else:
            count = outcome.first_bad - outcome.last_good
            message = (
                f"the first bad commit is one of {count} commits after {last_good.sha[:12]} up to "
                f"{first_bad.sha[:12]}: the commits between could not be tested"
            )
        if outcome.confidence is not None and outcome.confidence < 1.0:
            message += f" (posterior {outcome.confidence:.3f})"
        if confirmed:
            message += f"; confirmed: {confirmed}"
        if contradictions := state.contradictions():
            shas = ", ".join(self.commit_at(i).sha[:12] for i in contradictions[:5])
            message += f"; warning: tested good after the first bad commit: {shas} (not monotonic)"
        self.finish(status, first_bad=first_bad.sha, last_good=last_good.sha, message=message)
        return True

    def endpoints_differ(self) -> bool:
        """--expect auto: the endpoints' sample sets must differ, the way a regression (or a fix) does."""
        from bisector.stats import EndpointsCheck, check_endpoints

        good, bad = self.view(0).samples, self.view(self.position[self.record.bad]).samples
        direction = self.judge.direction
        assert direction is not None
        check, p_value = check_endpoints(good, bad, direction=direction, find_fix=self.spec.search.find_fix)
        if check is EndpointsCheck.DISTINCT:
            return True
        why = "do not differ" if check is EndpointsCheck.NOT_DISTINCT else "differ the wrong way"
        self.finish(
            BisectStatus.ENDPOINTS_MISMATCH,
            message=f"the endpoints' samples {why} (p={p_value:.3g}, {len(good)} and {len(bad)} samples); "
            "more --repeat, or check the range",
        )
        return False

    def confirmation(self, parent: int, first_bad: int) -> Confirmation | None:
        """Interleaved re-runs of the first bad commit and its parent; None while more pairs are needed."""
        from bisector.confirm import confirm_pass_fail

        if self.confirming != (parent, first_bad):
            self.confirming, self.confirm_pairs, self.pair_second = (parent, first_bad), [], {}
        if self.confirm_pairs or self.pair_second or any(p in (parent, first_bad) for p in self.in_flight.values()):
            return None
        before, after = self.view(parent), self.view(first_bad)
        if self.judge.statistical:
            from bisector.stats import confirm_samples

            result = confirm_samples(
                before.samples, after.samples, direction=self.judge.direction, find_fix=self.spec.search.find_fix
            )
        else:
            result = confirm_pass_fail((before.goods, before.bads), (after.goods, after.bads))
        if result.status is ConfirmStatus.NEED_MORE:
            self.observer.note(f"confirming {self.candidates[first_bad].sha[:12]}: {result.pairs_wanted} more pair(s)")
            self.confirm_pairs = [
                (parent, first_bad) if i % 2 == 0 else (first_bad, parent) for i in range(result.pairs_wanted)
            ]
            return None
        return result

    def descend_into_merge(self, merge: Commit) -> bool:
        """With --all-parents, continue the search inside the branch a bad merge brought in."""
        if not self.spec.search.all_parents or any(phase["merge"] == merge.sha for phase in self.merge_phases):
            return False
        repo = GitRepo(self.record.repo)
        side = repo.merged_branch(merge.sha)
        if not side:
            return False
        first_parent = self.position[repo.parents(merge.sha)[0]]
        start = len(self.candidates)
        if not self.candidates_stored:  # the merged commits are numbered after them
            self.store_candidates()
        self.store.add_candidates(self.record.id, [repo.commit(sha, start + i) for i, sha in enumerate(side)])
        self.candidates = self.store.candidates(self.record.id)
        self.position = {c.sha: c.position for c in self.candidates}
        order = [first_parent, *range(start, start + len(side)), merge.position]
        self.merge_phases.append({"merge": merge.sha, "order": order})
        self.update_extra(merge_phases=self.merge_phases)
        self.set_order(order)
        for step_id in list(self.in_flight):
            self.executor.cancel(step_id)
        self.observer.note(f"merge {merge.sha[:12]} is bad: bisecting the {len(side)} commit(s) it merged")
        return True

    def mismatch_message(self, good_end: Verdict | None, bad_end: Verdict | None) -> str:
        parts = []
        if good_end is Verdict.BAD:
            parts.append(f"the good endpoint {self.commit_at(0).sha[:12]} tested bad ({self.last_detail(0)})")
        if bad_end is Verdict.GOOD:
            parts.append(
                f"the bad endpoint {self.commit_at(self.last).sha[:12]} tested good ({self.last_detail(self.last)})"
            )
        return "; ".join(parts)

    def last_detail(self, index: int) -> str:
        steps = self.history[self.order[index]].steps if self.order[index] in self.history else []
        return steps[-1].detail.splitlines()[0] if steps and steps[-1].detail else "no detail"

    def submit_work(self) -> None:
        """Fill free slots: confirmation pairs, retries, more runs, the endpoints, then the strategy's probes."""
        strategy = self.strategy()
        if isinstance(strategy, KArySearch):
            self.cancel_irrelevant()
        self.submit_confirmation_runs()
        self.submit_reference_runs()
        busy = set(self.in_flight.values())
        tested = sorted(p for p in self.history if p in self.index_of)
        if isinstance(strategy, KArySearch):  # a retry outside the boundary would only be cancelled
            lo, hi = self.state().boundary()
            endpoints = (self.order[0], self.order[-1])
            tested = [p for p in tested if lo <= self.index_of[p] <= hi or p in endpoints]
        wanted = [p for p in tested if p not in busy and self.needs_retry(p) and self.placeable(p)]
        for position in tested:
            wanted += [position] * self.more_wanted(position)
        for index in (0, self.last):
            position = self.order[index]
            if position in busy or position in wanted or self.position_verdict(position) is not None:
                continue
            if position not in self.history or not (self.needs_retry(position) or self.more_wanted(position)):
                wanted += [position] * self.spec.search.repeat  # untested, or its only results were quarantined
        free = len(self.usable_workers()) - len(wanted)
        if free > 0:
            probes = [
                self.order[i] for i in strategy.next_probes(self.state(), max(free // self.spec.search.repeat, 1))
            ]
            for position in probes:
                if position not in wanted:
                    wanted += [position] * (self.spec.search.repeat if position not in self.history else 1)
        self.submit_all([(position, StepPurpose.SEARCH, "") for position in wanted[: len(self.usable_workers())]])

    def usable_workers(self) -> list[str]:
        """Free workers that are not quarantined and not holding the second half of a confirmation pair."""
        return [w for w in self.executor.free_workers() if w not in self.quarantined and w not in self.pair_second]

    def submit_reference_runs(self) -> None:
        """Known commits re-run on a suspect worker: a worker that gets them wrong is quarantined."""
        for worker in self.executor.free_workers():
            if worker in self.quarantined or worker in self.pair_second:
                continue
            check = next((c for c in self.reference_queue if c[0] == worker), None)
            if check is not None:
                self.reference_queue.remove(check)
                step_id = self.submit(check[1], StepPurpose.REFERENCE, pin_worker=worker)
                self.reference_in_flight[step_id] = check

    def check_disagreement(self, position: int) -> None:
        """Two workers with opposite verdicts on one commit: re-run the endpoints on each of them."""
        by_worker: dict[str, set[Verdict]] = defaultdict(set)
        for step in self.history[position].steps:
            if step.worker and step.worker not in self.quarantined and step.verdict in (Verdict.GOOD, Verdict.BAD):
                by_worker[step.worker].add(step.verdict)
        says = {worker: next(iter(v)) for worker, v in by_worker.items() if len(v) == 1}
        if len(set(says.values())) < 2:
            return
        for worker in sorted(says):
            if worker in self.reference_checked:
                continue
            self.reference_checked.add(worker)
            (good_pos, good_expect), (bad_pos, bad_expect) = self.reference_endpoints()
            runs = self.reference_runs()
            self.reference_queue += [(worker, good_pos, good_expect), (worker, bad_pos, bad_expect)] * runs
            self.observer.note(
                f"workers disagree on {self.candidates[position].sha[:12]}: checking {worker} on the endpoints"
            )
        self.update_extra(reference_checked=sorted(self.reference_checked))

    def reference_endpoints(self) -> tuple[tuple[int, Verdict], tuple[int, Verdict]]:
        """The known commits a reference check runs, each with the verdict a healthy worker gives it."""
        good_pos, bad_pos = 0, self.position[self.record.bad]
        if self.spec.search.find_fix:
            return (good_pos, Verdict.BAD), (bad_pos, Verdict.GOOD)
        return (good_pos, Verdict.GOOD), (bad_pos, Verdict.BAD)

    def reference_runs(self) -> int:
        # Several runs per endpoint: one unlucky run of a flaky test must not quarantine a healthy worker.
        return max(self.spec.search.repeat, REFERENCE_RUNS)

    def restore_reference_checks(self, stored_steps: Sequence[StepRecord]) -> None:
        """On resume: the answers already stored for each worker under check, and the runs it still owes
        (those that never finished, or were interrupted with the coordinator, are run again)."""
        for worker in sorted(self.reference_checked - set(self.quarantined)):
            own = [
                s for s in stored_steps
                if s.purpose is StepPurpose.REFERENCE and s.worker == worker and s.verdict is not None
                and s.error_kind is not ErrorKind.INTERRUPTED
            ]  # fmt: skip
            for position, expected in self.reference_endpoints():
                done = [s for s in own if self.position.get(s.sha) == position]
                self.reference_answers[worker] += [s.verdict is expected for s in done if s.verdict in DECIDED]
                self.reference_queue += [(worker, position, expected)] * max(0, self.reference_runs() - len(done))
            self.decide_quarantine(worker)  # all runs were back when the coordinator stopped

    def reference_result(self, result: StepResult) -> None:
        """Once all of a worker's reference runs are back: quarantine it if most of them were wrong."""
        worker, _, expected = self.reference_in_flight.pop(result.step_id)
        if result.verdict in DECIDED:
            self.reference_answers[worker].append(result.verdict is expected)
        self.decide_quarantine(worker)

    def decide_quarantine(self, worker: str) -> None:
        pending = any(c[0] == worker for c in [*self.reference_queue, *self.reference_in_flight.values()])
        answers = self.reference_answers[worker]
        if pending or worker in self.quarantined or not answers or sum(answers) * 2 > len(answers):
            return
        reason = (
            f"reference check: {len(answers) - sum(answers)} of {len(answers)} runs of the endpoints "
            f"(known good and bad) answered wrong on {worker}"
        )
        self.quarantined[worker] = reason
        for history in self.history.values():
            history.quarantined = frozenset(self.quarantined)
        self.forget_views()
        self.update_extra(quarantined=self.quarantined)
        self.observer.note(f"quarantined {worker} for the rest of the bisect ({reason})")

    def submit_confirmation_runs(self) -> None:
        """Each pair runs on one worker, its two commits back to back, alternating which goes first."""
        for worker in list(self.pair_second):
            if self.confirming and (worker in self.quarantined or worker not in self.executor.worker_names()):
                del self.pair_second[worker]  # the worker is gone: run the whole pair again elsewhere
                self.confirm_pairs.append(self.confirming)
        for worker in self.executor.free_workers():
            if worker in self.quarantined:
                continue
            if worker in self.pair_second:
                self.submit(self.pair_second.pop(worker), StepPurpose.CONFIRM, pin_worker=worker)
            elif self.confirm_pairs:
                first, second = self.confirm_pairs.pop(0)
                self.submit(first, StepPurpose.CONFIRM, pin_worker=worker)
                self.pair_second[worker] = second

    def placeable(self, position: int) -> bool:
        """A retry waits for a worker that has not failed this commit yet, unless every worker has."""
        avoid = self.history[position].failed_workers()
        if avoid >= {w for w in self.executor.worker_names() if w not in self.quarantined}:
            return True
        return any(name not in avoid for name in self.usable_workers())

    def cancel_irrelevant(self) -> None:
        """Stop in-flight probes outside the boundary (an endpoint check is never irrelevant)."""
        if self.verdict(0) is None or self.verdict(self.last) is None:
            return
        lo, hi = self.state().boundary()
        open_positions = set(self.order[lo : hi + 1])  # more runs at the boundary itself only help
        for step_id, position in list(self.in_flight.items()):
            if position not in open_positions:
                self.executor.cancel(step_id)

    def submit(self, position: int, purpose: StepPurpose = StepPurpose.SEARCH, pin_worker: str = "") -> int:
        return self.submit_all([(position, purpose, pin_worker)])[0]

    def submit_all(self, wanted: Sequence[tuple[int, StepPurpose, str]]) -> list[int]:
        """Start a step for each (position, purpose, pinned worker or ""), each on its own free worker. Their rows
        are written in one transaction, then the requests go out: a round's probes leave together."""
        planned: list[tuple[int, NewStep]] = []
        started = self.now()
        for position, purpose, pin_worker in wanted:
            history = self.history[position]
            attempt = len(history.steps) + 1 + sum(1 for p, _ in planned if p == position)
            taken = {step.worker for _, step in planned}
            worker = pin_worker or self.choose_worker(history.failed_workers(), taken)
            # Where it runs is known here; its node and GPUs come with the result.
            planned.append((position, NewStep(self.candidates[position].sha, attempt, worker, started, purpose)))
        step_ids = self.store.start_steps(self.record.id, [step for _, step in planned]) if planned else []
        sent = 0
        try:
            for step_id, (position, step) in zip(step_ids, planned, strict=True):
                self.send(step_id, position, step)
                sent += 1
        except BaseException as exc:
            unsent = zip(step_ids[sent:], planned[sent:], strict=True)
            self.never_sent([(i, step) for i, (_, step) in unsent if i not in self.in_flight], exc)
            raise
        return step_ids

    def send(self, step_id: int, position: int, step: NewStep) -> None:
        """Send one recorded step to its worker and track it."""
        history = self.history[position]
        request = self.spec.step_request(
            bisect_id=self.record.id,
            step_id=step_id,
            sha=step.sha,
            attempt=step.attempt,
            repo=self.record.repo,
            metric=self.metric,
            log_path=str(self.log_dir / f"step-{step_id}-{step.sha[:12]}.log"),
            avoid_workers=history.failed_workers(),
            pin_worker=step.worker,
        )
        assignment = self.executor.submit(request)
        self.in_flight[step_id] = position
        self.sent_at[step_id] = time.monotonic()
        history.steps.append(
            _running_step(step_id, self.record.id, step.sha, step.attempt, assignment, step.started, step.purpose)
        )
        self.forget_views(position)
        self.observer.step_started(step_id, self.candidates[position], step.attempt, assignment)

    def never_sent(self, steps: Sequence[tuple[int, NewStep]], why: BaseException) -> None:
        """Steps recorded as starting whose requests never went out (the executor failed on one of a round's):
        stored as interrupted, which neither counts against the commit nor shows them running."""
        detail = f"never sent to a worker: {why}".strip()
        unsent = [
            (step_id, StepResult(step_id, step.sha, Verdict.ERROR, error_kind=ErrorKind.INTERRUPTED, detail=detail),
             self.now())
            for step_id, step in steps
        ]  # fmt: skip
        with contextlib.suppress(Exception):  # the original error is the one to see
            self.store.finish_steps(unsent)

    def choose_worker(self, avoid: frozenset[str], taken: set[str] | frozenset[str] = frozenset()) -> str:
        """A usable free worker not taken already, preferring one that has not failed this commit."""
        usable = [w for w in self.usable_workers() if w not in taken]
        return next((w for w in usable if w not in avoid), usable[0])

    def record_result(self, result: StepResult) -> None:
        """Take a result into the search. It is written to the store (and shown) by flush_results, right after
        the work it lets the coordinator send: at a round boundary W results arrive within milliseconds, and
        the next probes should not wait for W writes."""
        position = self.in_flight.pop(result.step_id)
        self.sent_at.pop(result.step_id, None)
        if result.error_kind in HARNESS_KINDS:
            self.harness_failures.append(
                f"{result.error_kind.value}: {result.detail.splitlines()[0] if result.detail else '?'}"
            )
        elif result.verdict is not Verdict.CANCELLED:
            self.harness_failures.clear()
        self.cached_state = None
        finished = self.now()
        self.unwritten.append((result, finished, position))
        if result.step_id in self.reference_in_flight:
            self.history[position].steps = [s for s in self.history[position].steps if s.id != result.step_id]
            self.reference_result(result)
            return
        steps = self.history[position].steps
        steps[:] = [_finished_step(s, result, finished) if s.id == result.step_id else s for s in steps]
        self.forget_views()  # an endpoint's samples feed every other commit's view in comparative mode
        self.check_disagreement(position)

    def update_extra(self, **values: object) -> None:
        """What the search concluded from results (quarantines, confirmations, ...), stored after them."""
        self.flush_results()
        self.store.update_extra(self.record.id, **values)

    def flush_results(self) -> None:
        """Store the results taken in since the last flush, in one transaction, and show them."""
        if not self.unwritten:
            return
        taken, self.unwritten = self.unwritten, []
        try:
            self.store.finish_steps([(result.step_id, result, finished) for result, finished, _ in taken])
        except BaseException:
            self.unwritten = taken + self.unwritten  # not written: a later flush tries again
            raise
        for result, _, position in taken:
            self.observer.step_finished(result, self.candidates[position])

    def cancel_all(self) -> None:
        for step_id in list(self.in_flight):
            self.executor.cancel(step_id)
        while self.in_flight:
            self.take_results(self.poll_interval_s)
        self.flush_results()

    def finish(
        self, status: BisectStatus, *, first_bad: str | None = None, last_good: str | None = None, message: str = ""
    ) -> None:
        self.flush_results()  # every step's result is in the store before its verdict is
        if not self.candidates_stored:  # a bisect over within candidates_delay_s: its report needs them
            self.store_candidates()
        decisions = {
            self.candidates[p].sha: view.decision for p in self.history if (view := self.view(p)).decision is not None
        }
        extra: dict[str, object] = {}
        if decisions or self.flake_seen:
            extra.update(decisions=decisions, flake_seen=self.flake_seen)
        if status is BisectStatus.FOUND and (self.spec.analysis.explain or self.spec.analysis.minimize):
            extra["analysis"] = ANALYSIS_PENDING  # stored with the verdict: a resume finishes what is cut short
        if extra:
            self.update_extra(**extra)
        with contextlib.suppress(StateError):  # `bisect cancel` from another process got there first
            self.store.set_status(
                self.record.id, status, finished=self.now(), first_bad=first_bad, last_good=last_good, message=message
            )

    def report_progress(self) -> None:
        """At most every PROGRESS_INTERVAL_S (the live display refreshes 4 times a second): the search state and
        the estimate cost the loop time it should spend sending the next probes."""
        now = time.monotonic()
        if now - self.last_progress < PROGRESS_INTERVAL_S:
            return
        self.last_progress = now
        state = self.state()
        lo, hi = state.boundary()
        self.observer.progress(
            Progress(
                candidates=len(self.order),
                suspects=state.suspects(),
                running=len(self.in_flight),
                done=sum(1 for h in self.history.values() for s in h.steps if s.verdict is not None),
                estimated_left=estimated_steps_left(state, self.executor.slots) * self.spec.search.repeat,
                last_good=self.commit_at(lo),
                first_bad=self.commit_at(hi),
            )
        )
