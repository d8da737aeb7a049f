"""The Coordinator drives one bisect: verify the endpoints, ask the strategy, run steps, record facts.

Every fact goes to the store when it happens, so a coordinator killed at any moment can be replaced by
`bisect resume ID`, which rebuilds its state from the stored steps alone.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from bisector.domain import BisectRecord, BisectStatus, Commit, StepPurpose, StepRecord, StepResult, Verdict
from bisector.errors import BisectError, StateError
from bisector.gitrepo import GitRepo
from bisector.paths import log_dir
from bisector.progress import Progress, ProgressObserver, SilentObserver
from bisector.spec import BisectSpec
from bisector.strategies import KArySearch, OutcomeKind, SearchState, Strategy, estimated_steps_left
from db.store import Store
from workers.executor import Assignment, Executor, StepRequest

POLL_INTERVAL_S = 0.5

ExecutorFactory = Callable[[BisectSpec], Executor]
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def prepare_bisect(store: Store, spec: BisectSpec, now: Clock = utc_now) -> int:
    """Resolve and validate the range, then store the bisect and its candidates. Returns the new id."""
    repo = GitRepo(spec.repo)
    good, bad = repo.resolve(spec.good), repo.resolve(spec.bad)
    candidates = repo.range_for_bisect(good, bad)  # --all-parents descends into bad merges later
    bisect_id = store.create_bisect(str(repo.root), good, bad, spec.to_json(), now())
    store.add_candidates(bisect_id, candidates)
    return bisect_id


@dataclass
class _CommitHistory:
    """What the stored steps say about one commit."""

    steps: list[StepRecord] = field(default_factory=list)

    def decided(self) -> Verdict | None:
        for step in reversed(self.steps):
            if step.verdict in (Verdict.GOOD, Verdict.BAD, Verdict.SKIP):
                return step.verdict
        return None

    def errors(self) -> int:
        return sum(1 for s in self.steps if s.verdict is Verdict.ERROR)

    def failed_workers(self) -> frozenset[str]:
        return frozenset(s.worker for s in self.steps if s.verdict is Verdict.ERROR and s.worker)


def _running_step(
    step_id: int, bisect_id: int, sha: str, attempt: int, assignment: Assignment, started: datetime
) -> StepRecord:
    """The coordinator's own copy of a step it just stored, so the loop need not read it back."""
    return StepRecord(
        id=step_id, bisect_id=bisect_id, sha=sha, attempt=attempt, worker=assignment.worker, node=assignment.node,
        gpus=assignment.gpus, started=started, finished=None, build_s=None, run_s=None, exit_code=None,
        verdict=None, samples=(), log_path="", error_kind=None, detail="",
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
    ) -> None:
        self.store = store
        self.executor_factory = executor_factory
        self.strategy = strategy or KArySearch()
        self.observer = observer or SilentObserver()
        self.now = now
        self.poll_interval_s = poll_interval_s

    def start(self, spec: BisectSpec) -> BisectRecord:
        # The workers start while the range is listed and stored: their start-up is off the critical path.
        with self.executor_factory(spec) as executor:
            bisect_id = prepare_bisect(self.store, spec, self.now)
            count = len(self.store.candidates(bisect_id))
            self.observer.note(f"bisect {bisect_id}: {count} commits from good to bad; store {self.store.url}")
            return self._run(bisect_id, executor)

    def resume(self, bisect_id: int) -> BisectRecord:
        record = self.store.get_bisect(bisect_id)
        if record.status.is_terminal():
            raise StateError(f"bisect {bisect_id} is already {record.status.value}; nothing to resume")
        interrupted = self.store.interrupt_running_steps(bisect_id, self.now())
        if interrupted:
            self.observer.note(f"re-queued {interrupted} step(s) that were running when the coordinator stopped")
        return self.run(bisect_id)

    def run(self, bisect_id: int) -> BisectRecord:
        spec = BisectSpec.from_json(self.store.get_bisect(bisect_id).spec)
        with self.executor_factory(spec) as executor:
            return self._run(bisect_id, executor)

    def _run(self, bisect_id: int, executor: Executor) -> BisectRecord:
        record = self.store.get_bisect(bisect_id)
        spec = BisectSpec.from_json(record.spec)
        _Search(self, record, spec, executor).run()
        final = self.store.get_bisect(bisect_id)
        if final.status is BisectStatus.FOUND:
            self._analyse(final, spec, executor)
        self.observer.finished(final)
        return final

    def _analyse(self, record: BisectRecord, spec: BisectSpec, executor: Executor) -> None:
        """Explain and minimise a found culprit; a failure here is noted, the bisect's answer stands."""
        from bisector.explain import explain_bisect, minimize_bisect

        steps = [(spec.explain, explain_bisect), (spec.minimize, minimize_bisect)]
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

    def __init__(self, owner: Coordinator, record: BisectRecord, spec: BisectSpec, executor: Executor) -> None:
        self.store = owner.store
        self.strategy = owner.strategy
        self.observer = owner.observer
        self.now = owner.now
        self.poll_interval_s = owner.poll_interval_s
        self.record = record
        self.spec = spec
        self.executor = executor
        self.metric = spec.metric_spec()
        self.candidates: Sequence[Commit] = self.store.candidates(record.id)
        self.position = {c.sha: c.position for c in self.candidates}
        self.history: dict[int, _CommitHistory] = defaultdict(_CommitHistory)
        for step in self.store.steps(record.id):
            if step.purpose is StepPurpose.SEARCH:
                self.history[self.position[step.sha]].steps.append(step)
        self.in_flight: dict[int, int] = {}  # step id -> position
        self.merge_phases: list[dict[str, object]] = list(record.extra.get("merge_phases", []))  # type: ignore[call-overload]
        self.set_order(self.current_order())

    def set_order(self, order: list[int]) -> None:
        self.order = order
        self.index_of = {position: index for index, position in enumerate(order)}

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

    def position_verdict(self, position: int) -> Verdict | None:
        """The commit's verdict for the search; an error past the retry budget counts as a skip."""
        history = self.history.get(position)
        if history is None:
            return None
        decided = history.decided()
        if decided is None and history.errors() >= self.spec.max_attempts:
            return Verdict.SKIP
        return decided

    def state(self) -> SearchState:
        """The search state over self.order; O(commits tested), not O(range)."""
        verdicts = {
            self.index_of[p]: v
            for p in self.history
            if p in self.index_of and (v := self.position_verdict(p)) is not None
        }
        # A commit waiting for its retry counts as in flight: the strategy must not probe it on any worker.
        waiting = [p for p in self.history if self.needs_retry(p)]
        running = frozenset(self.index_of[p] for p in [*self.in_flight.values(), *waiting] if p in self.index_of)
        return SearchState(len(self.order), verdicts, running)

    def needs_retry(self, position: int) -> bool:
        history = self.history.get(position)
        if history is None:
            return False
        return 0 < history.errors() < self.spec.max_attempts and history.decided() is None

    # --- loop ----------------------------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            if self.store.get_bisect(self.record.id).status is BisectStatus.CANCELLED:
                self.cancel_all()
                return
            if self.concluded():
                self.cancel_all()
                return
            self.submit_work()
            if not self.in_flight:
                self.finish(BisectStatus.FAILED, message="nothing left to test and no conclusion (internal error)")
                return
            self.report_progress()
            for result in self.executor.poll(self.poll_interval_s):
                self.record_result(result)

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
        state = self.state()
        outcome = self.strategy.outcome(state)
        if outcome is None:
            return False
        first_bad, last_good = self.commit_at(outcome.first_bad), self.commit_at(outcome.last_good)
        if outcome.kind is OutcomeKind.FOUND and self.descend_into_merge(first_bad):
            return False
        status = BisectStatus.FOUND if outcome.kind is OutcomeKind.FOUND else BisectStatus.AMBIGUOUS
        if status is BisectStatus.FOUND:
            message = f"first bad commit: {first_bad.sha[:12]} {first_bad.subject}"
        else:
            count = outcome.first_bad - outcome.last_good
            message = (
                f"the first bad commit is one of {count} commits after {last_good.sha[:12]} up to "
                f"{first_bad.sha[:12]}: the commits between could not be tested"
            )
        if contradictions := state.contradictions():
            shas = ", ".join(self.commit_at(i).sha[:12] for i in contradictions[:5])
            message += f"; warning: tested good after the first bad commit: {shas} (not monotonic)"
        self.finish(status, first_bad=first_bad.sha, last_good=last_good.sha, message=message)
        return True

    def descend_into_merge(self, merge: Commit) -> bool:
        """With --all-parents, continue the search inside the branch a bad merge brought in."""
        if not self.spec.all_parents or any(phase["merge"] == merge.sha for phase in self.merge_phases):
            return False
        repo = GitRepo(self.record.repo)
        side = repo.merged_branch(merge.sha)
        if not side:
            return False
        first_parent = self.position[repo.parents(merge.sha)[0]]
        start = len(self.candidates)
        self.store.add_candidates(self.record.id, [repo.commit(sha, start + i) for i, sha in enumerate(side)])
        self.candidates = self.store.candidates(self.record.id)
        self.position = {c.sha: c.position for c in self.candidates}
        order = [first_parent, *range(start, start + len(side)), merge.position]
        self.merge_phases.append({"merge": merge.sha, "order": order})
        self.store.update_extra(self.record.id, merge_phases=self.merge_phases)
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
        """Fill free slots: retries first, then the endpoints, then the strategy's probes."""
        self.cancel_irrelevant()
        busy = set(self.in_flight.values())
        retries = sorted(p for p in self.history if p in self.index_of and p not in busy and self.needs_retry(p))
        wanted = [p for p in retries if self.placeable(p)]
        for index in (0, self.last):
            position = self.order[index]
            if position not in busy and position not in wanted and self.verdict(index) is None:
                wanted.append(position)
        free = self.executor.free_slots() - len(wanted)
        if free > 0:
            probes = [self.order[i] for i in self.strategy.next_probes(self.state(), free)]
            wanted.extend(p for p in probes if p not in wanted)
        for position in wanted[: self.executor.free_slots()]:
            self.submit(position)

    def placeable(self, position: int) -> bool:
        """A retry waits for a worker that has not failed this commit yet, unless every worker has."""
        avoid = self.history[position].failed_workers()
        if avoid >= set(self.executor.worker_names()):
            return True
        return any(name not in avoid for name in self.executor.free_workers())

    def cancel_irrelevant(self) -> None:
        """Stop in-flight probes outside the open range (an endpoint check is never irrelevant)."""
        if self.verdict(0) is None or self.verdict(self.last) is None:
            return
        lo, hi = self.state().boundary()
        open_positions = set(self.order[lo + 1 : hi])
        for step_id, position in list(self.in_flight.items()):
            if position not in open_positions:
                self.executor.cancel(step_id)

    def submit(self, position: int) -> None:
        commit = self.candidates[position]
        history = self.history[position]
        attempt = len(history.steps) + 1
        step_id = self.store.start_step(self.record.id, commit.sha, attempt, "", "", (), self.now())
        request = StepRequest(
            step_id=step_id,
            bisect_id=self.record.id,
            sha=commit.sha,
            attempt=attempt,
            repo=self.record.repo,
            run_cmd=self.spec.run,
            build_cmd=self.spec.build,
            metric=self.metric,
            log_path=str(log_dir(self.record.id) / f"step-{step_id}-{commit.sha[:12]}.log"),
            timeout_s=self.spec.timeout_s,
            env=self.spec.env,
            avoid_workers=history.failed_workers(),
        )
        started = self.now()
        assignment = self.executor.submit(request)
        self.store.assign_step(step_id, assignment.worker, assignment.node, assignment.gpus)
        self.in_flight[step_id] = position
        history.steps.append(_running_step(step_id, self.record.id, commit.sha, attempt, assignment, started))
        self.observer.step_started(step_id, commit, attempt, assignment)

    def record_result(self, result: StepResult) -> None:
        position = self.in_flight.pop(result.step_id)
        finished = self.now()
        self.store.finish_step(result.step_id, result, finished)
        steps = self.history[position].steps
        steps[:] = [_finished_step(s, result, finished) if s.id == result.step_id else s for s in steps]
        self.observer.step_finished(result, self.candidates[position])

    def cancel_all(self) -> None:
        for step_id in list(self.in_flight):
            self.executor.cancel(step_id)
        while self.in_flight:
            for result in self.executor.poll(self.poll_interval_s):
                self.record_result(result)

    def finish(
        self, status: BisectStatus, *, first_bad: str | None = None, last_good: str | None = None, message: str = ""
    ) -> None:
        with contextlib.suppress(StateError):  # `bisect cancel` from another process got there first
            self.store.set_status(
                self.record.id, status, finished=self.now(), first_bad=first_bad, last_good=last_good, message=message
            )

    def report_progress(self) -> None:
        state = self.state()
        lo, hi = state.boundary()
        self.observer.progress(
            Progress(
                candidates=len(self.order),
                suspects=state.suspects(),
                running=len(self.in_flight),
                done=sum(1 for h in self.history.values() for s in h.steps if s.verdict is not None),
                estimated_left=estimated_steps_left(state, self.executor.slots),
                last_good=self.commit_at(lo),
                first_bad=self.commit_at(hi),
            )
        )
