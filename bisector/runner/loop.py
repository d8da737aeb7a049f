"""The thin loop: asks the decision core what to do, does it against the executor and the store, and tells the
core what happened. Besides carrying out actions it owns only what needs a clock or I/O: `bisect cancel` and
a person's marks read from the store, the lease, the watchdog on steps whose results never come, progress, and
gathering a round: the steps one pass sent come back within moments of each other, and a pass that decided on
the first result alone would spend the free slot on a probe the others' results make useless, so the rest of
the batch is waited for, briefly (`gather_window_s`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from bisector.core.actions import Action, Cancel, Descend, Finish, Note, Record, Submit
from bisector.core.decide import SearchCore
from bisector.core.lookahead import likely_probes, still_open
from bisector.core.terms import term_of
from bisector.db.images import record_images
from bisector.db.store import Store
from bisector.runner.commit_details import CommitDetails
from bisector.runner.observer import ProgressObserver
from bisector.runner.ownership import Lease
from bisector.runner.pipeline import PlannedStep, StepPipeline
from bisector.vocab.domain import NOT_NEEDED, BisectStatus, Commit, ErrorKind, StepResult, Verdict
from bisector.vocab.errors import StateError
from bisector.vocab.gitrepo import GitRepo
from bisector.workers.build_ahead import AheadBuilder, AheadStatus, BuildAheadOutcome

CANCEL_CHECK_S = 0.5
PROGRESS_INTERVAL_S = 0.25
GATHER_FRACTION = 0.15  # of a step's duration: how long its batch-mates are waited for, at most
GATHER_MIN_S = 0.02
GATHER_MAX_S = 10.0


def gather_window_s(step_s: float) -> float:
    """How long the rest of a batch is waited for once one of its steps came back after step_s seconds. Equal
    steps come back well within it (the wait ends with the batch); unequal ones idle a slot at most this long."""
    return min(max(GATHER_FRACTION * step_s, GATHER_MIN_S), GATHER_MAX_S)


@dataclass(frozen=True)
class LoopTiming:
    poll_interval_s: float
    step_deadline_s: float  # from sending a step to giving up on its result (its timeout plus a grace)


class SearchLoop:
    def __init__(
        self,
        core: SearchCore,
        pipeline: StepPipeline,
        store: Store,
        observer: ProgressObserver,
        timing: LoopTiming,
        *,
        lease: Lease | None = None,
        manual_seen: int = 0,
        fresh: bool = False,
        build_ahead: AheadBuilder[Any] | None = None,
    ) -> None:
        """manual_seen: the id of the latest manual step the core has; fresh: a bisect created this moment (it
        cannot have been cancelled yet: its first check waits CANCEL_CHECK_S); build_ahead: builds the images of
        the likely next probes while the current ones run (stopped when the loop ends)."""
        self.core, self.pipeline, self.store, self.observer = core, pipeline, store, observer
        self.executor = pipeline.executor
        self.bisect_id = pipeline.bisect_id
        self.timing = timing
        self.lease = lease
        self.manual_seen = manual_seen
        self.commits: dict[int, Commit] = {}  # step id -> its commit, for the observer
        self.sent_at: dict[int, float] = {}  # step id -> monotonic time it was sent
        self.batch_of: dict[int, int] = {}  # running step id -> the number of the pass that sent it
        self.batches = 0
        self.last_cancel_check = time.monotonic() if fresh else -CANCEL_CHECK_S
        self.last_progress = -PROGRESS_INTERVAL_S
        self.build_ahead = build_ahead
        self.details = CommitDetails(store, self.bisect_id, pipeline.repo, core.ledger.candidates)

    def run(self) -> None:
        try:
            self.details.ensure(self.core.ledger.tested())  # a resumed bisect's, stored by older versions or by hand
            self.loop()
        except BaseException:
            with contextlib.suppress(Exception):  # keep what came back; the original error is the one to see
                self.flush()
            raise
        finally:
            self.stop_building_ahead()
        self.release_workers()
        self.flush()

    def release_workers(self) -> None:
        """Give back the workers the search's last `free_workers()` set aside (the executor contract's poll): the
        coordinator explains the culprit next, and a shared pool lends an idle bisect's slot, never a reserved one."""
        self.take(0.0)

    def loop(self) -> None:
        while True:
            if self.carry_out(self.core.decide(self.executor.free_workers(), self.executor.worker_names())):
                return
            self.build_next_images()
            # Results that came back while the steps went out are taken first: sending their successors matters
            # more than writing (a round's results arrive within milliseconds). At most a round's worth waits.
            if len(self.pipeline.unwritten) < self.executor.slots and self.take(0.0, gather=True):
                continue
            self.flush()
            if self.cancelled():  # read from the store: after the next steps are out, not before
                self.cancel_all("the bisect was cancelled")
                return
            if self.lease is not None and self.lease.lost.is_set():
                self.cancel_all("another coordinator took the bisect over")
                raise StateError(f"another coordinator took bisect {self.bisect_id} over; this one stopped")
            if not self.pipeline.running:  # workers are (re)starting: wait for one
                time.sleep(self.timing.poll_interval_s)
                continue
            self.report_progress()
            self.take(self.timing.poll_interval_s, gather=True)
            self.give_up_stalled()

    def carry_out(self, actions: Sequence[Action]) -> bool:
        """Do what the core asked; whether the search is over."""
        submits: list[Submit] = []
        for action in actions:
            if isinstance(action, Note):
                self.observer.note(action.text)
            elif isinstance(action, Record):
                self.flush()  # stored after the results they were concluded from
                self.store.update_extra(self.bisect_id, **action.records.to_extra(*action.names))
            elif isinstance(action, Cancel):
                self.pipeline.cancel(action.step_id, NOT_NEEDED)
            elif isinstance(action, Submit):
                submits.append(action)
            elif isinstance(action, Descend):
                self.carry_out(self.descend(action.merge, action.parent))
            elif isinstance(action, Finish):
                self.finish(action)
                return True
        self.submit(submits)
        return False

    def submit(self, submits: Sequence[Submit]) -> None:
        ledger = self.core.ledger
        planned = []
        for i, submit in enumerate(submits):
            earlier = sum(1 for s in submits[:i] if s.position == submit.position)
            sha = ledger.candidates[submit.position].sha
            attempt = ledger.attempts(submit.position) + 1 + earlier
            avoid = ledger.failed_workers(submit.position)
            planned.append(
                PlannedStep(sha, submit.purpose, submit.worker, attempt, avoid=avoid, preemptible=submit.preemptible)
            )
        self.batches += 1
        self.details.ensure(submit.position for submit in submits)
        for submit, sent in zip(submits, self.pipeline.send(planned), strict=True):
            step = sent.step
            self.core.started(step, submit)
            self.commits[step.id] = ledger.candidates[submit.position]
            self.sent_at[step.id] = time.monotonic()
            self.batch_of[step.id] = self.batches
            self.observer.step_started(step.id, self.commits[step.id], step.attempt, sent.assignment)

    def descend(self, merge: str, parent: int) -> list[Action]:
        """--all-parents: list the commits a bad merge brought in through its first parent from `parent` on that
        brought any (one that is an ancestor of the first parent brought none), numbered after the candidates; store
        them."""
        repo = GitRepo(self.pipeline.repo)
        parents = repo.parents(merge)
        for number in range(parent, len(parents)):
            if side := repo.merged_branch(merge, number):
                start = len(self.core.ledger.candidates)
                actions = self.core.descend(merge, parents[0], side, number)
                self.store.add_candidates(self.bisect_id, self.core.ledger.candidates, first_position=start)
                return actions
        self.core.no_branch(merge)
        return []

    def finish(self, finish: Finish) -> None:
        if finish.status is BisectStatus.PAUSED:
            self.cancel_all("the bisect paused")
            self.set_status(finish)
            self.observer.note(finish.message)
            return
        self.flush()  # every step's result is in the store before its verdict is
        self.describe_answer(finish)
        if finish.records is not None and finish.names:
            self.store.update_extra(self.bisect_id, **finish.records.to_extra(*finish.names))
        self.set_status(finish)
        self.cancel_all(NOT_NEEDED)

    def describe_answer(self, finish: Finish) -> None:
        """The commits the report of this answer shows, described before it is stored."""
        ledger = self.core.ledger
        first_bad, last_good = ledger.position.get(finish.first_bad or ""), ledger.position.get(finish.last_good or "")
        shown = ledger.candidates.shown(ledger.tested(), first_bad)
        if finish.status is BisectStatus.AMBIGUOUS and first_bad is not None and last_good is not None:
            shown += range(last_good + 1, first_bad + 1)  # the suspects
        self.details.ensure(shown)

    def set_status(self, finish: Finish) -> None:
        finished = None if finish.status is BisectStatus.PAUSED else self.pipeline.now()
        with contextlib.suppress(StateError):  # `bisect cancel` from another process got there first
            self.store.set_status(
                self.bisect_id, finish.status, finished=finished, first_bad=finish.first_bad,
                last_good=finish.last_good, message=finish.message,
            )  # fmt: skip

    def take(self, timeout_s: float, *, gather: bool = False) -> bool:
        """Take in the results that come back within timeout_s; whether there were any. gather: then wait for
        the rest of their batches (`gather_window_s`). A result of a step the watchdog gave up on comes too late
        and is dropped: the step is stored as stalled."""
        results = self.pipeline.poll(timeout_s)
        now = time.monotonic()
        batches = {self.batch_of[r.step_id] for r in results if r.step_id in self.batch_of}
        step_s = max((now - self.sent_at.get(r.step_id, now) for r in results), default=0.0)
        for result in results:
            self.took(result)
        if gather and batches:
            self.gather(batches, now + gather_window_s(step_s))
        return bool(results)

    def gather(self, batches: set[int], deadline: float) -> None:
        """Take results until no step of these batches runs, or none comes back by the deadline. Once every one
        still running is a probe whose result cannot matter, they are stopped, so that their slots come back
        with the rest (cancels land within milliseconds)."""
        stopped: set[int] = set()
        while mates := {step_id for step_id in self.pipeline.running if self.batch_of.get(step_id) in batches}:
            if mates <= set(self.core.irrelevant_flights()):
                for step_id in mates - stopped:
                    self.pipeline.cancel(step_id, NOT_NEEDED)
                stopped |= mates
            results = self.pipeline.poll(max(deadline - time.monotonic(), 0.0))
            if not results:
                return
            for result in results:
                self.took(result)

    def took(self, result: StepResult) -> None:
        self.sent_at.pop(result.step_id, None)
        self.batch_of.pop(result.step_id, None)
        self.core.took(result, self.pipeline.finished_at(result.step_id))

    def flush(self) -> None:
        for result in self.pipeline.flush():
            word = term_of(self.pipeline.spec, result.verdict)
            self.observer.step_finished(result, self.commits.pop(result.step_id), word)

    def give_up_stalled(self) -> None:
        """The watchdog: a step whose result has not come step_deadline_s after it was sent is stored as a
        stalled harness error, and its worker is abandoned (executors replace it)."""
        now, deadline_s = time.monotonic(), self.timing.step_deadline_s
        for step_id, sent in list(self.sent_at.items()):
            if now - sent <= deadline_s or step_id not in self.pipeline.running:
                continue
            self.executor.abandon(step_id)
            detail = (
                f"no result {deadline_s:.0f} s after the step was sent (its timeout is "
                f"{self.pipeline.spec.test.timeout_s:g} s): the worker was given up on"
            )
            step = self.pipeline.running[step_id]
            self.took(self.pipeline.took(StepResult(step_id, step.sha, Verdict.ERROR, error_kind=ErrorKind.STALLED,
                                                    detail=detail, log_path=step.log_path)))  # fmt: skip

    def cancelled(self) -> bool:
        """Whether `bisect cancel` marked the bisect; read from the store at most every CANCEL_CHECK_S, with the
        verdicts a person stored meanwhile (`bisect mark`), which join their commits' evidence."""
        now = time.monotonic()
        if now - self.last_cancel_check < CANCEL_CHECK_S:
            return False
        self.last_cancel_check = now
        marks = self.store.manual_steps(self.bisect_id, after_id=self.manual_seen)
        for step in marks:
            self.manual_seen = step.id
            self.core.take_manual(step)
        if marks:
            self.details.ensure(self.core.ledger.tested())  # before the core concludes from them
        return self.store.get_bisect(self.bisect_id).status is BisectStatus.CANCELLED

    def cancel_all(self, why: str) -> None:
        for step_id in list(self.pipeline.running):
            self.pipeline.cancel(step_id, why)
        while self.pipeline.running:
            self.take(self.timing.poll_interval_s)
        self.flush()

    def build_next_images(self) -> None:
        """Build the images of the commits the search will likely probe next; stop those it no longer will."""
        if self.build_ahead is None:
            return
        candidates = self.core.ledger.candidates
        try:
            wanted = likely_probes(self.core, self.build_ahead.limit)
            requests = [self.pipeline.build_ahead_request(candidates[p].sha) for p in wanted]
            self.record_built_ahead(self.build_ahead.want(requests, still_open(self.core)))
        except Exception as exc:  # building ahead only saves time: each step can build its own image
            self.observer.note(f"no more images are built ahead: {type(exc).__name__}: {exc}")
            self.stop_building_ahead()
            self.build_ahead = None

    def record_built_ahead(self, ended: Sequence[BuildAheadOutcome]) -> None:
        """Store the commits whose images were just built ahead, as they are made (a coordinator killed later
        keeps them in the record)."""
        made = [o for o in ended if o.status is AheadStatus.READY and o.sha not in self.core.records.built_ahead]
        if made:
            records = self.core.records
            self.core.records = replace(records, built_ahead=(*records.built_ahead, *(o.sha for o in made)))
            self.store.update_extra(self.bisect_id, **self.core.records.to_extra("built_ahead"))
            with self.store.writing() as conn:  # listed by `bisect images ls` before any step uses them
                record_images(conn, [o.image for o in made if o.image is not None])

    def stop_building_ahead(self) -> None:
        if self.build_ahead is None:
            return
        ended = self.build_ahead.close()
        if self.lease is None or not self.lease.lost.is_set():  # a coordinator that took over keeps its own record
            with contextlib.suppress(Exception):  # the store may be what failed: the images are there all the same
                self.record_built_ahead(ended)
        outcomes = self.build_ahead.outcomes.values()
        made = [o.sha for o in outcomes if o.status is AheadStatus.READY]
        stopped = sum(1 for o in outcomes if o.status is AheadStatus.CANCELLED)
        if made or stopped:
            ledger = self.core.ledger  # a commit built ahead was untested: a result now means a step tested it
            histories = [ledger.histories.get(ledger.position[sha]) for sha in made]
            used = sum(1 for history in histories if history is not None and history.results({}))
            self.observer.note(
                f"images built ahead of their steps this run: {len(made)}, {used} of them then tested; "
                f"{stopped} build(s) stopped once the search no longer needed them"
            )

    def report_progress(self) -> None:
        """At most every PROGRESS_INTERVAL_S (the live display refreshes 4 times a second)."""
        now = time.monotonic()
        if now - self.last_progress >= PROGRESS_INTERVAL_S:
            self.last_progress = now
            progress = self.core.progress(self.executor.slots)
            if self.build_ahead is not None and self.build_ahead.running:
                ledger = self.core.ledger
                building = tuple(ledger.candidates[ledger.position[sha]] for sha in self.build_ahead.running)
                progress = replace(progress, building_ahead=building)
            self.observer.progress(progress)
