"""The decision core of a bisect: from the ledger (runs per commit, steps in flight, quarantined workers) and
the phase (the order searched, a confirmation under way, checks owed), the actions to take next.

No I/O here: no store, no executor, no git, no clock. The loop (bisector/runner/loop.py) tells the core what
happened (`started`, `took`, `take_manual`, `descend`) and carries out what `decide` returns; the simulator
(benchmarks/simulate.py) drives the same core with simulated results.

The search runs over `order`: positions into the candidates, good end first (the first-parent chain, or the
branch of a merge descended into, bisector/core/merges.py). Each `decide` either concludes (Finish), asks
for a merge's branch (Descend), or fills the free workers: confirmation pairs, reference runs, retries, more
runs, the endpoints, then the strategy's probes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from bisector.core.actions import Action, Cancel, Descend, Finish, Note, Record, Submit
from bisector.core.confirm import ConfirmStatus
from bisector.core.confirmation import Confirming
from bisector.core.endpoints import depends_on
from bisector.core.health import Health, ReferenceCheck
from bisector.core.ledger import HARNESS_KINDS, Ledger
from bisector.core.merges import MergeDescent
from bisector.core.options import VerifyEndpoints
from bisector.core.progress import Progress
from bisector.core.records import Analysis, EndpointCheck, SearchRecords
from bisector.core.strategies import KArySearch, OutcomeKind, SearchState, Strategy, estimated_steps_left
from bisector.core.strategies.noisy import NoisyBisect, is_consistent
from bisector.core.strategies.select import choose_strategy
from bisector.vocab.domain import PAUSE_ADVICE, BisectStatus, Commit, StepPurpose, StepRecord, StepResult, Verdict

WorkerPreference = Callable[[str, Sequence[str]], list[str]]  # (sha, workers that could run it) -> best first

HARNESS_PAUSE_AFTER = 3  # harness failures in a row (no step result between) that pause the bisect


class SearchCore:
    def __init__(
        self,
        bisect_id: int,
        ledger: Ledger,
        records: SearchRecords,
        *,
        stored: Sequence[StepRecord] = (),
        strategy: Strategy | None = None,
        verify: VerifyEndpoints = VerifyEndpoints.LAZY,
        prefer: WorkerPreference | None = None,
    ) -> None:
        """stored: the bisect's steps so far (reference runs are restored from them); strategy: None to choose
        as the bisect goes (kary, noisy once noise is expected or seen); prefer: orders the workers that could run
        a commit, best first (the executor's, e.g. those holding the commit's image); default: as given."""
        self.bisect_id = bisect_id
        self.ledger = ledger
        self.spec = ledger.spec
        self.records = records
        self.fixed_strategy = strategy
        self.verify = verify
        self.prefer: WorkerPreference = prefer or (lambda sha, workers: list(workers))
        self.flake_seen = records.flake_seen
        self.health = Health(ledger, records.reference_checked, self.flake_rate)
        self.confirming = Confirming(ledger)
        pruned = records.pruning.removed() if records.pruning else frozenset()
        self.merges = MergeDescent(ledger, records.merge_phases, self.spec.search.all_parents, pruned)
        self.checks_owed: dict[str, ReferenceCheck] = {}  # worker -> the reference run just asked of it
        self.harness_failures: list[str] = []  # since the last step result
        self.outbox: list[Action] = []  # what taking results concluded, handed out by the next decide
        ledger.quarantined.update(records.quarantined)
        ledger.set_noisy(self.noise_expected())
        self.set_order(self.merges.order())
        for worker, reason in self.health.restore(stored):
            self.quarantine(worker, reason)

    # --- what is known ---------------------------------------------------------------------------------------

    def set_order(self, order: list[int]) -> None:
        self.order = order
        self.index_of = {position: index for index, position in enumerate(order)}
        self._state: SearchState | None = None

    @property
    def last(self) -> int:
        return len(self.order) - 1

    def commit_at(self, index: int) -> Commit:
        return self.ledger.candidates[self.order[index]]

    def verdict(self, index: int) -> Verdict | None:
        return self.ledger.verdict(self.order[index])

    def state(self) -> SearchState:
        """The search state over the order, computed once per change (a pass asks for it several times)."""
        if self._state is None:
            ledger, index_of = self.ledger, self.index_of
            tested = [p for p in ledger.tested() if p in index_of]
            verdicts = {index_of[p]: v for p in tested if (v := ledger.verdict(p)) is not None}
            views = {p: ledger.view(p) for p in tested}
            observations = {index_of[p]: (v.goods, v.bads) for p, v in views.items() if v.goods + v.bads}
            # A commit waiting for a retry or more runs counts as in flight: the strategy must not probe it.
            waiting = [p for p in tested if ledger.needs_retry(p) or ledger.more_wanted(p)]
            flying = [f.position for f in ledger.in_flight.values()]
            running = frozenset(index_of[p] for p in [*flying, *waiting] if p in index_of)
            self._state = SearchState(len(self.order), verdicts, running, observations)
        return self._state

    def changed(self) -> None:
        self._state = None

    def flake_rate(self) -> float:
        """The flake rate the search has learned: the noisy search's estimate, 0 while nothing contradicts."""
        strategy = self.chosen_strategy()
        return (strategy if isinstance(strategy, NoisyBisect) else NoisyBisect()).flake_rate(self.state())

    def noise_expected(self) -> bool:
        return self.spec.search.strategy == "noisy" or self.spec.search.repeat_limit > 1 or self.flake_seen

    def lazy(self) -> bool:
        """Endpoints are run when the conclusion rests on them or a slot is spare; never once noise is expected
        or a commit could not be tested: then both run before the search relies on them (a test that cannot run
        anywhere ends at the good endpoint, not after a skip at every commit)."""
        return self.verify is VerifyEndpoints.LAZY and not self.noise_expected() and not self.skip_seen()

    def skip_seen(self) -> bool:
        return any(v is Verdict.SKIP for v in self.state().verdicts.values())

    def strategy(self) -> Strategy:
        """The strategy for what is known now, after noticing flakes in it (which makes the search noisy)."""
        if self.fixed_strategy is None and not self.flake_seen:
            observed = self.state().observed()
            if any(g and b for g, b in observed.values()) or not is_consistent(len(self.order), observed):
                self.flake_seen = True
                self.ledger.set_noisy(True)
                self.changed()
                self.outbox.append(Note("flaky results seen (a commit both good and bad, or good after bad)"))
                # Stored now: a later quarantine can take the flake out of the evidence a resume judges by.
                self.records = replace(self.records, flake_seen=True)
                self.stored("flake_seen")
        return self.chosen_strategy()

    def chosen_strategy(self) -> Strategy:
        """The strategy as chosen so far, without looking for flakes (which is `decide`'s to do, after it has
        looked for a conclusion)."""
        if self.fixed_strategy is not None:
            return self.fixed_strategy
        return choose_strategy(self.spec.search.strategy, self.spec.search.repeat_limit, self.flake_seen)

    # --- what happened ---------------------------------------------------------------------------------------

    def started(self, step: StepRecord, submit: Submit) -> None:
        self.ledger.started(step, submit.position)
        if submit.purpose is StepPurpose.REFERENCE:
            self.health.in_flight[step.id] = self.checks_owed.pop(submit.worker)
        self.changed()

    def never_started(self, submit: Submit) -> None:
        """A submission the loop could not carry out: what it owed is owed again."""
        if submit.purpose is StepPurpose.REFERENCE and (check := self.checks_owed.pop(submit.worker, None)):
            self.health.queue.insert(0, check)

    def took(self, result: StepResult, finished: datetime) -> None:
        """A step's result, taken in at `finished`."""
        if result.error_kind in HARNESS_KINDS:
            self.harness_failures.append(
                f"{result.error_kind.value}: {result.detail.splitlines()[0] if result.detail else '?'}"
            )
        elif result.verdict is not Verdict.CANCELLED:
            self.harness_failures.clear()
        flight = self.ledger.finished(result, finished)
        self.changed()
        if flight.purpose is StepPurpose.REFERENCE:
            if reason := self.health.result(result.step_id, result.verdict):
                self.quarantine(flight.worker, reason)
            return
        for worker in self.health.disagreement(flight.position):
            sha = self.ledger.candidates[flight.position].sha
            self.outbox.append(Note(f"workers disagree on {sha[:12]}: checking {worker} on the endpoints"))
        if self.health.checked != set(self.records.reference_checked):
            self.records = replace(self.records, reference_checked=tuple(sorted(self.health.checked)))
            self.stored("reference_checked")

    def take_manual(self, step: StepRecord) -> None:
        """A person's verdict (`bisect mark`) stored while the search runs: it decides its commit."""
        if self.ledger.add_manual(step):
            self.changed()

    def descend(self, merge: str, first_parent: str, branch: Sequence[str], parent: int) -> list[Action]:
        """The answer of a Descend (branch: the commits the merge brought in through its parent `parent`, oldest
        first): the merge's branch is bisected next; what runs now is irrelevant."""
        self.set_order(self.merges.descend(merge, first_parent, branch, parent))
        self.records = replace(self.records, merge_phases=tuple(self.merges.phases))
        self.stored("merge_phases")
        out = [*self.drain(), *(Cancel(step_id) for step_id in self.ledger.in_flight)]
        before = "the parents before brought no commit or their branches are good alone"
        through = f" through its parent {parent + 1} ({before})" if parent > 1 else ""
        return [*out, Note(f"merge {merge[:12]} is bad: bisecting the {len(branch)} commit(s) it merged{through}")]

    def no_branch(self, sha: str) -> None:
        self.merges.not_merges.add(sha)

    def quarantine(self, worker: str, reason: str) -> None:
        self.ledger.quarantine(worker, reason)
        self.changed()
        self.records = replace(self.records, quarantined=dict(self.ledger.quarantined))
        self.stored("quarantined")
        self.outbox.append(Note(f"quarantined {worker} for the rest of the bisect ({reason})"))

    def stored(self, *names: str) -> None:
        """The named records changed: store them (after the results they come from)."""
        self.outbox.append(Record(self.records, names))

    def drain(self) -> list[Action]:
        out, self.outbox = self.outbox, []
        return out

    # --- what to do --------------------------------------------------------------------------------------------

    def decide(self, free: Sequence[str], workers: Sequence[str]) -> list[Action]:
        """free: the workers free now; workers: every worker the executor has (free or busy)."""
        done = self.conclusion(workers)
        if done is not None:
            return [*self.drain(), done]
        submits = self.submissions(free, workers)
        usable = [w for w in free if w not in self.ledger.quarantined and w not in self.confirming.second]
        if not submits and not self.ledger.in_flight and usable:
            failed = Finish(BisectStatus.FAILED, "nothing left to test and no conclusion (internal error)")
            return [*self.drain(), failed]
        return [*self.drain(), *submits]

    def conclusion(self, workers: Sequence[str]) -> Finish | Descend | None:
        good_end, bad_end = self.verdict(0), self.verdict(self.last)
        if good_end is Verdict.SKIP or bad_end is Verdict.SKIP:
            which, index = ("good", 0) if good_end is Verdict.SKIP else ("bad", self.last)
            sha, why = self.commit_at(index).sha, self.ledger.last_detail(self.order[index])
            return self.finish(BisectStatus.FAILED, f"the {which} endpoint {sha[:12]} cannot be tested: {why}")
        if good_end is Verdict.BAD or bad_end is Verdict.GOOD:
            return self.finish(BisectStatus.ENDPOINTS_MISMATCH, self.mismatch_message(good_end, bad_end))
        if set(workers) <= set(self.ledger.quarantined):
            reasons = "; ".join(self.ledger.quarantined.values())
            return self.finish(BisectStatus.FAILED, f"every worker is quarantined: {reasons}")
        if len(self.harness_failures) >= HARNESS_PAUSE_AFTER:
            count, last = len(self.harness_failures), self.harness_failures[-1]
            message = f"paused: the test harness failed {count} times in a row, never the commits (last: {last}); "
            return Finish(BisectStatus.PAUSED, message + PAUSE_ADVICE)
        if (good_end is None or bad_end is None) and not self.lazy():
            return None
        if self.ledger.judge.metric.comparative and (mismatch := self.endpoints_mismatch()):
            return self.finish(BisectStatus.ENDPOINTS_MISMATCH, mismatch)
        return conclude(self)

    def endpoints_mismatch(self) -> str:
        """--expect auto: the endpoints' sample sets must differ, the way a regression (or a fix) does."""
        from bisector.core.stats import DEFAULT_ALPHA, EndpointsCheck, check_endpoints

        good, bad = self.ledger.view(0).samples, self.ledger.view(self.ledger.bad_position).samples
        direction = self.ledger.judge.direction
        assert direction is not None
        check, p_value = check_endpoints(good, bad, direction=direction, find_fix=self.spec.search.find_fix)
        if check is EndpointsCheck.DISTINCT:
            return ""
        counts = f"p={p_value:.3g}, needed < {DEFAULT_ALPHA:g}; {len(good)} and {len(bad)} samples"
        if check is EndpointsCheck.WRONG_WAY:
            return f"the endpoints' samples differ the wrong way ({counts}); check the range and --direction"
        advice = "a higher --max-repeat, or check the range"
        return f"the endpoints' samples do not differ ({counts}, all --max-repeat allows): {advice}"

    def mismatch_message(self, good_end: Verdict | None, bad_end: Verdict | None) -> str:
        parts, (old, new) = [], self.spec.search.terms()  # --find-fix: broken / fixed
        if good_end is Verdict.BAD:
            why = self.ledger.last_detail(self.order[0])
            parts.append(f"the {old} endpoint {self.commit_at(0).sha[:12]} tested {new} ({why})")
        if bad_end is Verdict.GOOD:
            why = self.ledger.last_detail(self.order[self.last])
            parts.append(f"the {new} endpoint {self.commit_at(self.last).sha[:12]} tested {old} ({why})")
        return "; ".join(parts)

    def finish(
        self, status: BisectStatus, message: str, first_bad: str | None = None, last_good: str | None = None
    ) -> Finish:
        names = ["endpoints"]
        self.records = replace(self.records, endpoints=self.endpoint_checks())
        decisions = self.ledger.decisions()
        if decisions or self.flake_seen:
            self.records = replace(self.records, decisions=decisions, flake_seen=self.flake_seen)
            names += ["decisions", "flake_seen"]
        if status is BisectStatus.FOUND and (self.spec.analysis.explain or self.spec.analysis.minimize):
            # Stored with the verdict: a resume finishes an explanation cut short.
            self.records = replace(self.records, analysis=Analysis.PENDING)
            names.append("analysis")
        return Finish(status, message, first_bad, last_good, self.records, tuple(names))

    def endpoint_checks(self) -> dict[str, EndpointCheck]:
        """How each endpoint was checked: as recorded when it was sent; marked when only a person's verdicts are
        known of it; otherwise by the policy when it has a result, assumed when none."""
        tested = EndpointCheck.TESTED_LAZILY if self.lazy() else EndpointCheck.TESTED
        checks = {}
        for name, position in {"good": 0, "bad": self.ledger.bad_position}.items():
            history = self.ledger.histories.get(position)
            if history is None:
                checks[name] = EndpointCheck.ASSUMED
            elif name not in self.records.endpoints and all(s.purpose is StepPurpose.MANUAL for s in history.steps):
                checks[name] = EndpointCheck.MARKED
            else:
                checks[name] = self.records.endpoints.get(name, tested)
        return checks

    def endpoints_sent(self, submits: Sequence[Submit]) -> None:
        """Record why an endpoint runs, the first time it is sent: before relying on it (first, or noise), because
        the conclusion rests on it, or in a spare slot."""
        names = {0: "good", self.ledger.bad_position: "bad"}
        sent = {names[s.position] for s in submits if s.position in names} - set(self.records.endpoints)
        if not sent:
            return
        owed = {names.get(self.order[index]) for index in self.endpoints_owed()}
        if not self.lazy():
            why = dict.fromkeys(sent, EndpointCheck.TESTED)
        else:
            why = {n: EndpointCheck.TESTED_LAZILY if n in owed else EndpointCheck.TESTED_SPARE for n in sent}
        self.records = replace(self.records, endpoints={**self.records.endpoints, **why})
        self.stored("endpoints")

    def submissions(self, free: Sequence[str], workers: Sequence[str]) -> list[Action]:
        """Fill free workers: confirmation pairs, reference runs, retries, more runs, the endpoints, probes."""
        strategy = self.strategy()
        out: list[Action] = []
        out += self.cancel_irrelevant()
        free = [w for w in free if w not in self.ledger.quarantined]
        self.confirming.requeue_lost(workers)
        taken: set[str] = set()
        for worker in free:
            if (position := self.confirming.next_run(worker)) is not None:
                out.append(Submit(position, StepPurpose.CONFIRM, worker))
                taken.add(worker)
            elif worker not in self.confirming.second and (check := self.health.next_check(worker)):
                self.checks_owed[worker] = check
                out.append(Submit(check.position, StepPurpose.REFERENCE, worker))
                taken.add(worker)
        usable = [w for w in free if w not in taken and w not in self.confirming.second]
        wanted = search_positions(self, strategy, usable, workers)
        for position in wanted[: len(usable)]:
            worker = self.prefer(self.ledger.candidates[position].sha, self.placeable_on(position, usable))[0]
            usable.remove(worker)
            out.append(Submit(position, StepPurpose.SEARCH, worker, preemptible=True))
        self.endpoints_sent([a for a in out if isinstance(a, Submit) and a.purpose is StepPurpose.SEARCH])
        return out

    def placeable_on(self, position: int, usable: Sequence[str]) -> list[str]:
        """The workers to run this commit on, from those usable: not one that failed it, and one that has not run it
        yet where there is one (runs of one commit on one worker would agree on that worker's fault, and a fault
        is only found where two workers disagree)."""
        failed, ran = self.ledger.failed_workers(position), self.ledger.workers_of(position)
        working = [w for w in usable if w not in failed] or list(usable)
        return [w for w in working if w not in ran] or working

    def cancel_irrelevant(self) -> list[Action]:
        """Stop in-flight probes whose results can no longer matter."""
        return [Cancel(step_id) for step_id in self.irrelevant_flights()]

    def irrelevant_flights(self) -> list[int]:
        """Step ids of the K-ary search's in-flight probes outside the boundary (an endpoint check is never
        irrelevant): what they say cannot change the answer."""
        if not isinstance(self.chosen_strategy(), KArySearch):
            return []
        if not self.lazy() and (self.verdict(0) is None or self.verdict(self.last) is None):
            return []
        lo, hi = self.state().boundary()
        open_positions = set(self.order[lo : hi + 1])  # more runs at the boundary itself only help
        ends = {self.order[0], self.order[self.last]}
        return [
            step_id
            for step_id, flight in self.ledger.in_flight.items()
            if flight.position not in open_positions and flight.position not in ends
        ]

    def progress(self, slots: int) -> Progress:
        state = self.state()
        lo, hi = state.boundary()
        return Progress(
            candidates=len(self.order),
            suspects=state.suspects(),
            running=len(self.ledger.in_flight),
            done=self.ledger.done(),
            estimated_left=estimated_steps_left(state, slots) * self.spec.search.repeat,
            last_good=self.commit_at(lo),
            first_bad=self.commit_at(hi),
        )

    def confirming_answer(self) -> bool:
        """Whether the strategy has found its answer and it waits for its confirmation. The search then probes no
        more: the confirmation's pairs re-test the boundary, and a probe running there holds the confirmation back
        (a noisy search keeps probing its boundary, so at W > 1 one always would)."""
        outcome = self.chosen_strategy().outcome(self.state())
        return outcome is not None and self.confirming.wanted(self.flake_seen)

    def endpoints_owed(self) -> list[int]:
        """Indexes (0, last) of the endpoints to run now: both unless lazy; lazily, those the answer rests on."""
        if not self.lazy():
            return [0, self.last]
        outcome = self.strategy().outcome(self.state())
        if outcome is None:
            return []
        need_good, need_bad = depends_on(outcome.last_good, outcome.first_bad, self.last)
        return [i for i, need in ((0, need_good), (self.last, need_bad)) if need]

    def endpoints_reached(self) -> list[int]:
        """Lazily: indexes (0, last) of the endpoints the candidates still reach (no probe good yet: the good
        end; none bad: the bad end), which the answer may come to rest on. Run in slots no probe can use."""
        if not self.lazy():
            return []
        lo, hi = self.state().boundary()
        return [i for i, reached in ((0, lo == 0), (self.last, hi == self.last)) if reached]


# The two questions `SearchCore.decide` asks each pass: is the search over (and with what answer), and which
# commits the free workers run next. Pure functions of the core's state; they change only its plans (the
# confirmation pairs owed) and its records.


def conclude(core: SearchCore) -> Finish | Descend | None:
    """The answer once the strategy has one, its endpoints are checked, a bad merge was descended into and the
    culprit confirmed (where confirmation is wanted); None while the search goes on."""
    state = core.state()
    outcome = core.strategy().outcome(state)
    if outcome is None:
        return None
    if any(core.verdict(index) is None for index in core.endpoints_owed()):
        return None  # lazily: an endpoint the answer rests on runs first
    first_bad, last_good = core.commit_at(outcome.first_bad), core.commit_at(outcome.last_good)
    old_term, new_term = core.spec.search.terms()  # git's words: "the first fixed commit" with --find-fix
    if outcome.kind is OutcomeKind.FOUND and (parent := core.merges.wants(first_bad.sha)) is not None:
        return Descend(first_bad.sha, parent)
    confirmed = ""
    if core.confirming.wanted(core.flake_seen):  # an ambiguous answer's range too: its ends are re-run
        confirmation, note = core.confirming.evaluate(last_good.position, first_bad.position)
        if note:
            core.outbox.append(Note(note))
        if confirmation is None:
            return None
        core.records = replace(core.records, confirmation=confirmation)
        core.stored("confirmation")
        if confirmation.status is ConfirmStatus.NOT_REPRODUCIBLE:
            # Named by sha: the last good commit is not the culprit's parent after pruning or in a merged branch.
            looked, rerun = (
                (f"{first_bad.sha[:12]} looked like the first {new_term} commit", "it")
                if outcome.kind is OutcomeKind.FOUND
                else (
                    f"the first {new_term} commit looked like one of the commits after {last_good.sha[:12]} up to "
                    f"{first_bad.sha[:12]}",
                    first_bad.sha[:12],
                )
            )
            message = (
                f"{looked}, but re-running {rerun} against {last_good.sha[:12]} did not reproduce the difference "
                f"({confirmation.reason}): flaky, not a culprit"
            )
            return core.finish(BisectStatus.NOT_REPRODUCIBLE, message, first_bad.sha, last_good.sha)
        confirmed = confirmation.reason
    status = BisectStatus.FOUND if outcome.kind is OutcomeKind.FOUND else BisectStatus.AMBIGUOUS
    if status is BisectStatus.FOUND:
        message = f"first {new_term} commit: {first_bad.sha[:12]} {first_bad.subject}"
    else:
        count = outcome.first_bad - outcome.last_good
        message = (
            f"the first {new_term} commit is one of {count} commits after {last_good.sha[:12]} up to "
            f"{first_bad.sha[:12]}: the commits between could not be tested"
        )
    if outcome.confidence is not None and outcome.confidence < 1.0:
        message += f" (posterior {outcome.confidence:.3f})"
    if confirmed:
        message += f"; confirmed: {confirmed}"
    if contradictions := state.contradictions(outcome.first_bad):
        shas = ", ".join(core.commit_at(i).sha[:12] for i in contradictions[:5])
        message += f"; warning: tested {old_term} after the first {new_term} commit: {shas} (not monotonic)"
    return core.finish(status, message, first_bad.sha, last_good.sha)


def search_positions(core: SearchCore, strategy: Strategy, usable: Sequence[str], workers: Sequence[str]) -> list[int]:
    """Positions to run for the search, most urgent first (one entry per run): retries, more runs, the
    endpoints owed, the strategy's probes for the workers left, then (lazily) the endpoints the candidates
    still reach, in slots no probe can use."""
    ledger, order, repeat = core.ledger, core.order, core.spec.search.repeat
    busy = {f.position for f in ledger.in_flight.values()}
    tested = sorted(p for p in ledger.tested() if p in core.index_of)
    if isinstance(strategy, KArySearch):  # a retry outside the boundary would only be cancelled
        lo, hi = core.state().boundary()
        ends = (order[0], order[-1])
        tested = [p for p in tested if lo <= core.index_of[p] <= hi or p in ends]
    wanted = [p for p in tested if p not in busy and ledger.needs_retry(p) and placeable(core, p, usable, workers)]
    for position in tested:
        if placeable(core, position, usable, workers):
            wanted += [position] * ledger.more_wanted(position)
    wanted += endpoint_runs(core, core.endpoints_owed(), busy, wanted)
    free = len(usable) - len(wanted)
    if free > 0 and not core.confirming_answer():
        for position in [order[i] for i in strategy.next_probes(core.state(), max(free // repeat, 1))]:
            if position not in wanted:
                wanted += [position] * (repeat if position not in ledger.histories else 1)
    if len(wanted) < len(usable):
        wanted += endpoint_runs(core, core.endpoints_reached(), busy, wanted)
    return wanted


def endpoint_runs(core: SearchCore, indexes: Sequence[int], busy: set[int], wanted: Sequence[int]) -> list[int]:
    """Runs of the endpoints at these indexes that are undecided, not running and not already wanted."""
    ledger, out = core.ledger, []
    for index in indexes:
        position = core.order[index]
        if position in busy or position in wanted or ledger.verdict(position) is not None:
            continue
        if position not in ledger.histories or not (ledger.needs_retry(position) or ledger.more_wanted(position)):
            out += [position] * core.spec.search.repeat  # untested, or its only results were quarantined
    return out


def placeable(core: SearchCore, position: int, usable: Sequence[str], workers: Sequence[str]) -> bool:
    """A commit's retry or further run waits for a worker that has not run it yet, unless every worker has."""
    avoid = core.ledger.workers_of(position)
    if avoid >= {w for w in workers if w not in core.ledger.quarantined}:
        return True
    return any(name not in avoid for name in usable)
