"""The Coordinator drives one bisect: verify the endpoints, ask the strategy, run steps, record facts.

Every fact goes to the store when it happens, so a coordinator killed at any moment can be replaced by
`bisect resume ID`, which rebuilds its state from the stored steps alone.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from bisector.domain import BisectRecord, BisectStatus, Commit, StepRecord, StepResult, Verdict
from bisector.errors import StateError
from bisector.gitrepo import GitRepo
from bisector.paths import log_dir
from bisector.progress import Progress, ProgressObserver, SilentObserver
from bisector.spec import BisectSpec
from bisector.strategies import KArySearch, OutcomeKind, SearchState, Strategy, estimated_steps_left
from db.store import Store
from workers.executor import Executor, StepRequest

POLL_INTERVAL_S = 0.5

ExecutorFactory = Callable[[BisectSpec], Executor]
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def prepare_bisect(store: Store, spec: BisectSpec, now: Clock = utc_now) -> int:
    """Resolve and validate the range, then store the bisect and its candidates. Returns the new id."""
    repo = GitRepo(spec.repo)
    good, bad = repo.resolve(spec.good), repo.resolve(spec.bad)
    candidates = repo.range_for_bisect(good, bad, first_parent=not spec.all_parents)
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
        return self.run(prepare_bisect(self.store, spec, self.now))

    def resume(self, bisect_id: int) -> BisectRecord:
        record = self.store.get_bisect(bisect_id)
        if record.status.is_terminal():
            raise StateError(f"bisect {bisect_id} is already {record.status.value}; nothing to resume")
        interrupted = self.store.interrupt_running_steps(bisect_id, self.now())
        if interrupted:
            self.observer.note(f"re-queued {interrupted} step(s) that were running when the coordinator stopped")
        return self.run(bisect_id)

    def run(self, bisect_id: int) -> BisectRecord:
        record = self.store.get_bisect(bisect_id)
        spec = BisectSpec.from_json(record.spec)
        with self.executor_factory(spec) as executor:
            _Search(self, record, spec, executor).run()
        final = self.store.get_bisect(bisect_id)
        self.observer.finished(final)
        return final


class _Search:
    """The state of one run of the coordinator loop over one bisect."""

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
            self.history[self.position[step.sha]].steps.append(step)
        self.in_flight: dict[int, int] = {}  # step id -> position

    # --- state ---------------------------------------------------------------------------------------------

    @property
    def last(self) -> int:
        return len(self.candidates) - 1

    def verdict(self, position: int) -> Verdict | None:
        """The commit's verdict for the search; an error past the retry budget counts as a skip."""
        history = self.history[position]
        decided = history.decided()
        if decided is None and history.errors() >= self.spec.max_attempts:
            return Verdict.SKIP
        return decided

    def state(self) -> SearchState:
        verdicts = {p: v for p in range(len(self.candidates)) if (v := self.verdict(p)) is not None}
        return SearchState(len(self.candidates), verdicts, frozenset(self.in_flight.values()))

    def needs_retry(self, position: int) -> bool:
        history = self.history[position]
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
            which = "good" if good_end is Verdict.SKIP else "bad"
            position = 0 if which == "good" else self.last
            self.finish(
                BisectStatus.FAILED,
                message=f"the {which} endpoint {self.candidates[position].sha[:12]} cannot be tested: "
                f"{self.last_detail(position)}",
            )
            return True
        if good_end is Verdict.BAD or bad_end is Verdict.GOOD:
            self.finish(BisectStatus.ENDPOINTS_MISMATCH, message=self.mismatch_message(good_end, bad_end))
            return True
        if good_end is None or bad_end is None:
            return False
        outcome = self.strategy.outcome(self.state())
        if outcome is None:
            return False
        status = BisectStatus.FOUND if outcome.kind is OutcomeKind.FOUND else BisectStatus.AMBIGUOUS
        first_bad, last_good = self.candidates[outcome.first_bad], self.candidates[outcome.last_good]
        if status is BisectStatus.FOUND:
            message = f"first bad commit: {first_bad.sha[:12]} {first_bad.subject}"
        else:
            count = outcome.first_bad - outcome.last_good
            message = (
                f"the first bad commit is one of {count} commits after {last_good.sha[:12]} up to "
                f"{first_bad.sha[:12]}: the commits between could not be tested"
            )
        contradictions = self.state().contradictions()
        if contradictions:
            shas = ", ".join(self.candidates[p].sha[:12] for p in contradictions[:5])
            message += f"; warning: tested good after the first bad commit: {shas} (not monotonic)"
        self.finish(status, first_bad=first_bad.sha, last_good=last_good.sha, message=message)
        return True

    def mismatch_message(self, good_end: Verdict | None, bad_end: Verdict | None) -> str:
        parts = []
        if good_end is Verdict.BAD:
            parts.append(f"the good endpoint {self.candidates[0].sha[:12]} tested bad ({self.last_detail(0)})")
        if bad_end is Verdict.GOOD:
            parts.append(
                f"the bad endpoint {self.candidates[self.last].sha[:12]} tested good ({self.last_detail(self.last)})"
            )
        return "; ".join(parts)

    def last_detail(self, position: int) -> str:
        steps = self.history[position].steps
        return steps[-1].detail.splitlines()[0] if steps and steps[-1].detail else "no detail"

    def submit_work(self) -> None:
        """Fill free slots: retries first, then the endpoints, then the strategy's probes."""
        self.cancel_irrelevant()
        busy = set(self.in_flight.values())
        wanted = [p for p in sorted(self.history) if p not in busy and self.needs_retry(p) and self.placeable(p)]
        for endpoint in (0, self.last):
            if endpoint not in busy and endpoint not in wanted and self.verdict(endpoint) is None:
                wanted.append(endpoint)
        free = self.executor.free_slots() - len(wanted)
        if free > 0:
            wanted.extend(p for p in self.strategy.next_probes(self.state(), free) if p not in wanted)
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
        for step_id, position in list(self.in_flight.items()):
            if not lo < position < hi:
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
        assignment = self.executor.submit(request)
        self.store.assign_step(step_id, assignment.worker, assignment.node, assignment.gpus)
        self.in_flight[step_id] = position
        history.steps.append(self.store.step(step_id))
        self.observer.step_started(step_id, commit, attempt, assignment)

    def record_result(self, result: StepResult) -> None:
        position = self.in_flight.pop(result.step_id)
        self.store.finish_step(result.step_id, result, self.now())
        steps = self.history[position].steps
        steps[:] = [self.store.step(result.step_id) if s.id == result.step_id else s for s in steps]
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
                candidates=len(self.candidates),
                suspects=state.suspects(),
                running=len(self.in_flight),
                done=sum(1 for h in self.history.values() for s in h.steps if s.verdict is not None),
                estimated_left=estimated_steps_left(state, self.executor.slots),
                last_good=self.candidates[lo],
                first_bad=self.candidates[hi],
            )
        )
