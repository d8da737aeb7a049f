"""The Coordinator: the entry point of a bisect (start, resume, rerun, run, minimize) and the one place that
wires a search's parts together (the ledger and decision core of bisector/core/, the step pipeline and loop here).

Every fact goes to the store when it happens, so a coordinator killed at any moment can be replaced by
`bisect resume ID`, which rebuilds its state from the stored steps alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from bisector.core.decide import HARNESS_PAUSE_AFTER, SearchCore
from bisector.core.ledger import Ledger
from bisector.core.options import PruneMode, VerifyEndpoints
from bisector.core.records import Analysis, SearchRecords
from bisector.core.spec import BisectSpec
from bisector.core.strategies import Strategy
from bisector.db.store import Store
from bisector.runner.log_retention import keep_logs_bounded
from bisector.runner.loop import LoopTiming, SearchLoop
from bisector.runner.observer import ProgressObserver, SilentObserver
from bisector.runner.ownership import HEARTBEAT_S, LEASE_TTL_S, Lease
from bisector.runner.pipeline import StepPipeline
from bisector.runner.reruns import (
    RerunRegistration,
    end_dead_reruns,
    reruns_stopped,
    revoke_reruns,
    running_rerun_commits,
)
from bisector.runner.side_runs import CANCELLED_WHY, SideRunner
from bisector.runner.stopping import StopRequested
from bisector.vocab.commit_range import CommitRange
from bisector.vocab.domain import RERUN_STOP_WAIT_S, BisectRecord, BisectStatus, SideRun, StepPurpose, StepResult
from bisector.vocab.errors import BisectError, StateError
from bisector.vocab.gitrepo import GitRepo
from bisector.workers.executor import Executor

POLL_INTERVAL_S = 0.5
WATCHDOG_MIN_GRACE_S = 60.0  # a step's result may come this long after its timeout before the watchdog acts
__all__ = [
    "HARNESS_PAUSE_AFTER", "CancelOutcome", "Coordinator", "cancel_bisect", "prepare_bisect",
    "store_missing_candidates", "utc_now",
]  # fmt: skip

ExecutorFactory = Callable[[BisectSpec], Executor]
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def prepare_bisect(
    store: Store, spec: BisectSpec, now: Clock = utc_now, *, extra: Mapping[str, object] | None = None
) -> int:
    """Resolve and validate the range, then store the bisect (with extra, in one transaction) and its candidates.
    Returns the new id."""
    return _prepare(store, spec, now, extra)[0].id


def _prepare(
    store: Store, spec: BisectSpec, now: Clock, extra: Mapping[str, object] | None = None
) -> tuple[BisectRecord, CommitRange]:
    """The bisect and its candidates are stored before any step is sent. Returns the stored bisect as it is now,
    so that the caller need not read it back."""
    repo = GitRepo(spec.repo)
    good, bad = repo.resolve(spec.good), repo.resolve(spec.bad)
    candidates = repo.range_for_bisect(good, bad, spec.test.paths)  # --all-parents descends into bad merges later
    created, spec_json = now(), spec.to_json()
    bisect_id = store.create_bisect(str(repo.root), good, bad, spec_json, created, **(extra or {}))
    store.add_candidates(bisect_id, candidates)
    record = BisectRecord(
        id=bisect_id, repo=str(repo.root), good=good, bad=bad, spec=spec_json, status=BisectStatus.RUNNING,
        created=created, finished=None, first_bad=None, last_good=None,
    )  # fmt: skip
    return record, candidates


def store_missing_candidates(store: Store, record: BisectRecord) -> bool:
    """List and store the candidates of a bisect whose creation was cut short between storing the bisect and its
    candidates, so that its report names every commit. Whether it stored them; not when they are there already
    or the repository is gone."""
    if store.candidates(record.id):
        return False
    try:
        paths = BisectSpec.from_json(record.spec).test.paths
        store.add_candidates(record.id, GitRepo(record.repo).range_for_bisect(record.good, record.bad, paths))
    except BisectError:
        return False
    return True


@dataclass(frozen=True)
class CancelOutcome:
    """What a cancel ended: the bisect's status after it (cancelled, or the end it had reached before), the commits
    of the reruns of it that it stopped, and of those it asked to stop that still ran when its wait ended."""

    status: BisectStatus
    reruns: tuple[str, ...]
    ended_before: bool  # the bisect had ended: the cancel stopped its reruns alone
    asked: tuple[str, ...] = ()


def cancel_bisect(
    store: Store,
    bisect_id: int,
    now: Clock = utc_now,
    *,
    stop_here: Callable[[bool], Iterable[str]] = lambda ended: (),
    wait_s: float = RERUN_STOP_WAIT_S,
) -> CancelOutcome:
    """`bisect cancel`: a bisect that has not ended is stored as cancelled (its coordinator stops at its next look)
    and every rerun of it stops its steps, stored as cancelled, and ends; of a bisect that has ended, its reruns
    alone, its end kept. The cancel waits up to wait_s (reruns.reruns_stopped) for the reruns to end and names those
    it stopped, not one that ended by itself meanwhile, and apart those still running then (asked to stop); the
    running steps of dead reruns are stored as interrupted. stop_here(whether it had ended): what only the caller can
    stop (a server's own threads, waited for up to wait_s), once the store is changed; the commits of the reruns it
    stopped. StateError when it has ended and it stopped or asked no rerun."""
    record = store.get_bisect(bisect_id)
    end_dead_reruns(store, bisect_id, now())
    status, ended = record.status, record.status.is_terminal()
    if not ended:
        try:
            store.set_status(bisect_id, BisectStatus.CANCELLED, finished=now(), message=CANCELLED_WHY)
        except StateError:  # its coordinator ended it meanwhile
            status, ended = store.get_bisect(bisect_id).status, True
        else:
            status = BisectStatus.CANCELLED
            store_missing_candidates(store, record)  # its coordinator may have died before storing them
    revoked = revoke_reruns(store, bisect_id, now())
    here = tuple(stop_here(ended))
    stopped, asked = reruns_stopped(store, bisect_id, revoked, now, wait_s)
    reruns = tuple(dict.fromkeys((*stopped, *here)))
    end_dead_reruns(store, bisect_id, now())  # one kept beside a living rerun at its commit that has now ended
    if ended and not reruns and not asked:
        raise StateError(f"bisect {bisect_id} is already {status.value}")
    return CancelOutcome(status, reruns, ended, asked)


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
        self.watchdog_grace_s = watchdog_grace_s
        self.lease_ttl_s = lease_ttl_s
        self.heartbeat_s = heartbeat_s

    def start(self, spec: BisectSpec, executor: Executor | None = None) -> BisectRecord:
        """executor: one already started (its workers boot while the caller opens the store); closed here."""
        # The workers start while the range is listed and stored: their start-up is off the critical path.
        with executor or self.executor_factory(spec) as executor:
            record, candidates = _prepare(self.store, spec, self.now)
            count, url = len(candidates), self.store.url
            old, new = spec.search.terms()
            self.observer.note(f"bisect {record.id}: {count} commits from {old} to {new}; store {url}")
            with self._lease(record.id) as lease, self._stoppable(record.id):
                return self._run(record, executor, candidates, fresh=True, lease=lease)

    def _lease(self, bisect_id: int) -> Lease:
        return Lease(self.store, bisect_id, self.now, ttl_s=self.lease_ttl_s, heartbeat_s=self.heartbeat_s)

    @contextlib.contextmanager
    def _stoppable(self, bisect_id: int) -> Iterator[None]:
        """A stop signal (bisector/runner/stopping.py) while the bisect runs: its running steps are stored as
        interrupted, while this coordinator still holds the lease, so that `bisect resume` runs them again."""
        try:
            yield
        except StopRequested as stop:
            stop.bisect_id = bisect_id
            with contextlib.suppress(BisectError):
                stop.interrupted_steps = self._interrupt_own_steps(bisect_id)
            raise

    def _interrupt_own_steps(self, bisect_id: int, last_seen: datetime | None = None) -> int:
        """Store the bisect's running steps as interrupted, but for those of its reruns still running (`run-at
        --bisect`, in any process), which are theirs; how many. last_seen: the last heartbeat of the gone
        coordinator that ran them, when they are counted to have ended (they stopped with it), else now."""
        now = self.now()
        return self.store.interrupt_running_steps(
            bisect_id, last_seen or now, lambda extra: running_rerun_commits(extra, now)
        )

    def resume(
        self, bisect_id: int, executor_overrides: Mapping[str, object] | None = None, *, explain: bool | None = None
    ) -> BisectRecord:
        """Continue from the store; executor_overrides (executor, workers, ray_address, ...) move the rest of
        the bisect to other workers without changing what is tested. A found culprit whose explanation was
        cut short (analysis pending) gets its explanation; a paused bisect runs again. explain: whether this
        run explains a culprit it finds or finds pending (None: as the bisect's spec says)."""
        record = self.store.get_bisect(bisect_id)
        end_dead_reruns(self.store, bisect_id, self.now())  # whatever the bisect's state: a rerun may outlive it
        analysis_pending = (
            record.status is BisectStatus.FOUND and SearchRecords.from_extra(record.extra).analysis is Analysis.PENDING
        )
        if record.status.is_terminal() and not analysis_pending:
            raise StateError(f"bisect {bisect_id} is already {record.status.value}; nothing to resume")
        spec = _explaining(BisectSpec.from_json(record.spec), explain)
        if executor_overrides:
            spec = spec.with_executor(executor_overrides)
            self.store.update_extra(bisect_id, resumed_with=dict(executor_overrides))
        # The lease first: the steps of a coordinator that is still alive must not be marked interrupted.
        with self._lease(bisect_id) as lease, self._stoppable(bisect_id):
            interrupted = self._interrupt_own_steps(bisect_id, last_seen=record.heartbeat)
            if interrupted:
                self.observer.note(f"re-queued {interrupted} step(s) that were running when the coordinator stopped")
            if record.status is BisectStatus.PAUSED:
                self.store.set_status(bisect_id, BisectStatus.RUNNING, message="resumed after a pause")
            with self.executor_factory(spec) as executor:
                if analysis_pending:
                    final = self._finish_analysis(self.store.get_bisect(bisect_id), spec, executor)
                    self.observer.finished(final)
                    return final
                return self._run(self.store.get_bisect(bisect_id), executor, lease=lease, explain=explain)

    def rerun(
        self,
        bisect_id: int,
        rev: str,
        times: int = 1,
        executor_overrides: Mapping[str, object] | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> list[StepResult]:
        """`bisect run-at --bisect`: the bisect's build and test at any commit, `times` runs, stored as rerun steps.
        SideRunsCancelledError once cancelled() or `bisect cancel` (cancel_bisect, from any process) says so: both
        are asked every round, from before the executor starts. RerunLostError once another process judged it gone
        (its registration removed, its steps stored as interrupted): it stops its steps and writes nothing. Its
        registration is judged by this coordinator's lease TTL."""
        if times < 1:
            raise StateError(f"--repeat must be at least 1 (got {times})")
        record = self.store.get_bisect(bisect_id)
        end_dead_reruns(self.store, bisect_id, self.now())
        spec = BisectSpec.from_json(record.spec)
        sha = GitRepo(record.repo).resolve(rev)
        spec = spec.with_executor(executor_overrides or {})
        registration = RerunRegistration(self.store, bisect_id, sha, self.now, self.heartbeat_s, self.lease_ttl_s)
        with registration, self.executor_factory(spec) as executor:

            def stop_asked() -> bool:
                registration.record_groups(executor.process_groups())  # for a reaper, should this process die
                return cancelled() or registration.revoked()

            runner = self._side_runner(record, spec, executor, stop_asked)
            return runner.run([SideRun(sha, StepPurpose.RERUN, label=f"rerun-{i}") for i in range(times)])

    def run(self, bisect_id: int) -> BisectRecord:
        spec = BisectSpec.from_json(self.store.get_bisect(bisect_id).spec)
        with self._lease(bisect_id) as lease, self._stoppable(bisect_id), self.executor_factory(spec) as executor:
            return self._run(self.store.get_bisect(bisect_id), executor, lease=lease)

    def _run(
        self,
        record: BisectRecord,
        executor: Executor,
        candidates: CommitRange | None = None,
        *,
        fresh: bool = False,
        lease: Lease | None = None,
        explain: bool | None = None,
    ) -> BisectRecord:
        """fresh: the bisect was just created (with these candidates): it has no steps yet. explain: as resume's."""
        spec = _explaining(BisectSpec.from_json(record.spec), explain)
        if spec.search.prune is PruneMode.AUTO and SearchRecords.from_extra(record.extra).pruning is None:
            record = self._prune(record, spec, executor)  # a bisect stored first and run later (service, replay) too
        self._loop(record, spec, executor, candidates, fresh=fresh, lease=lease).run()
        final = self.store.get_bisect(record.id)
        if final.status is BisectStatus.FOUND and SearchRecords.from_extra(final.extra).analysis is Analysis.PENDING:
            final = self._finish_analysis(final, spec, executor)
        self.observer.finished(final)
        if final.status.is_terminal():
            keep_logs_bounded(self.store, self.observer.note)
        return final

    def _prune(self, record: BisectRecord, spec: BisectSpec, executor: Executor) -> BisectRecord:
        """--prune auto: the probe at the bad commit, and the candidates it leaves out, stored before the search."""
        from bisector.runner.prune_probe import probe_and_plan

        def runner_for(probe_spec: BisectSpec) -> SideRunner:
            return self._side_runner(record, probe_spec, executor)

        plan = probe_and_plan(self.store, runner_for, record, self.observer)
        self.observer.note(plan.note)
        self.store.update_extra(record.id, **SearchRecords(pruning=plan).to_extra("pruning"))
        return self.store.get_bisect(record.id)

    def _loop(
        self,
        record: BisectRecord,
        spec: BisectSpec,
        executor: Executor,
        candidates: CommitRange | None,
        *,
        fresh: bool,
        lease: Lease | None,
    ) -> SearchLoop:
        """The search's parts, wired: the ledger from the stored steps, the decision core, the pipeline, the loop."""
        if candidates is None:
            store_missing_candidates(self.store, record)  # a bisect whose creation was cut short
            candidates = self.store.candidates(record.id)
        steps = [] if fresh else self.store.steps(record.id)
        ledger = Ledger(spec, candidates, record.bad, steps)
        verify = VerifyEndpoints.chosen(spec.search.verify_endpoints)
        pipeline = StepPipeline(self.store, executor, record.id, record.repo, spec, self.now)
        core = SearchCore(
            record.id, ledger, SearchRecords.from_extra(record.extra), stored=steps, strategy=self.strategy,
            verify=verify, prefer=pipeline.prefer_workers,
        )  # fmt: skip
        grace_s = self.watchdog_grace_s
        if grace_s is None:
            grace_s = max(WATCHDOG_MIN_GRACE_S, spec.test.timeout_s / 4)
        timing = LoopTiming(self.poll_interval_s, spec.test.timeout_s + grace_s)
        manual_seen = max((s.id for s in steps if s.purpose is StepPurpose.MANUAL), default=0)
        limit = spec.executor.build_ahead_limit()
        build_ahead = executor.ahead_builder(limit) if limit else None
        return SearchLoop(core, pipeline, self.store, self.observer, timing, lease=lease, manual_seen=manual_seen,
                          fresh=fresh, build_ahead=build_ahead)  # fmt: skip

    def _finish_analysis(self, record: BisectRecord, spec: BisectSpec, executor: Executor) -> BisectRecord:
        """The analysis phase of a found culprit: its verdict is stored and shown before the side runs start, and
        the phase is marked done only after them, so a coordinator stopped meanwhile leaves it for resume."""
        self.observer.note(f"{record.message}; now explaining it (--no-explain skips this)")
        self._analyse(record, spec, executor)
        self.store.update_extra(record.id, **replace(SearchRecords(), analysis=Analysis.DONE).to_extra("analysis"))
        return self.store.get_bisect(record.id)

    def _analyse(self, record: BisectRecord, spec: BisectSpec, executor: Executor) -> None:
        """Explain and minimise a found culprit; a failure here is noted, the bisect's answer stands."""
        if not (spec.analysis.explain or spec.analysis.minimize):
            return  # not even the import: it takes a small host ~0.1 s
        from bisector.explain import explain_bisect, minimize_bisect

        steps = [(spec.analysis.explain, explain_bisect), (spec.analysis.minimize, minimize_bisect)]
        runner = self._side_runner(record, spec, executor)
        for wanted, analysis in steps:
            if not wanted:
                continue
            try:
                analysis(self.store, runner, record, self.observer)
            except BisectError as exc:
                self.observer.note(f"{analysis.__name__.split('_')[0]} failed: {exc}")

    def _side_runner(
        self, record: BisectRecord, spec: BisectSpec, executor: Executor, cancelled: Callable[[], bool] = lambda: False
    ) -> SideRunner:
        return SideRunner(self.store, executor, record.id, spec, self.now, self.observer, cancelled=cancelled)

    def minimize(self, bisect_id: int) -> BisectRecord:
        """`bisect minimize ID`: ddmin over a found culprit's changes, on the bisect's executor."""
        from bisector.explain import minimize_bisect

        record = self.store.get_bisect(bisect_id)
        spec = BisectSpec.from_json(record.spec)
        with self.executor_factory(spec) as executor:
            minimize_bisect(self.store, self._side_runner(record, spec, executor), record, self.observer)
        return self.store.get_bisect(bisect_id)


def _explaining(spec: BisectSpec, explain: bool | None) -> BisectSpec:
    """spec, explaining a culprit as `explain` says (None: as it is)."""
    return spec if explain is None else replace(spec, analysis=replace(spec.analysis, explain=explain))
