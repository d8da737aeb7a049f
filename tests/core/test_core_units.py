"""The decision core's parts on their own: pure, no git, no store."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pytest

from bisector.core.actions import Finish, Record, Submit
from bisector.core.confirm import Confirmation, ConfirmStatus
from bisector.core.confirmation import Confirming
from bisector.core.decide import SearchCore
from bisector.core.endpoints import binomial_tail, depends_on, endpoint_verdict
from bisector.core.health import Health
from bisector.core.judge import CommitView
from bisector.core.ledger import Ledger
from bisector.core.options import VerifyEndpoints
from bisector.core.records import Analysis, EndpointCheck, MergePhase, SearchRecords
from bisector.core.spec import BisectSpec
from bisector.vocab.domain import Commit, ErrorKind, StepPurpose, StepRecord, StepResult, Verdict

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _ledger(steps: list[StepRecord] = (), *, short_shas: bool = False, **spec: object) -> Ledger:  # type: ignore[assignment]
    """Six candidates, commit i's sha i in hex (short_shas: its digit 40 times, so short shas differ too)."""
    candidates = [Commit(i, f"{i:x}" * 40 if short_shas else f"{i:040x}", f"change {i}", "a", NOW) for i in range(6)]
    values: dict[str, object] = {"repo": "/nowhere", "good": "a", "bad": "b", "run": "true", **spec}
    return Ledger(BisectSpec.from_options(values), candidates, candidates[-1].sha, steps)


def _step(step_id: int, position: int, verdict: Verdict, error_kind: ErrorKind | None = None) -> StepRecord:
    return StepRecord(
        id=step_id, bisect_id=1, sha=f"{position:040x}", attempt=1, worker="w0", node="", gpus=(), started=NOW,
        finished=NOW, build_s=None, run_s=None, exit_code=None, verdict=verdict, samples=(), log_path="",
        error_kind=error_kind, detail="", purpose=StepPurpose.SEARCH,
    )  # fmt: skip


def test_a_pair_whose_worker_is_gone_is_run_again_whole():
    confirming = Confirming(_ledger())
    confirming.pair, confirming.second = (2, 3), {"w0": 3}
    confirming.requeue_lost(["w1"])
    assert (confirming.pairs, confirming.second) == ([(2, 3)], {})
    assert confirming.next_run("w1") == 2
    assert confirming.second == {"w1": 3}


def test_errors_past_the_retry_budget_make_a_skip_but_harness_failures_never_count():
    harness = [_step(i, 2, Verdict.ERROR, ErrorKind.INTERRUPTED) for i in range(5)]
    assert _ledger(harness).verdict(2) is None
    failures = [_step(i, 2, Verdict.ERROR, ErrorKind.INFRA) for i in range(3)]
    assert _ledger(failures).verdict(2) is Verdict.SKIP
    assert _ledger(failures[:2]).needs_retry(2)


def test_an_endpoint_with_noise_wants_more_runs_before_contradicting_its_role():
    one_bad = CommitView(Verdict.BAD, goods=0, bads=1)
    assert endpoint_verdict(one_bad, Verdict.GOOD, noisy=False) == (Verdict.BAD, 0)
    assert endpoint_verdict(one_bad, Verdict.GOOD, noisy=True) == (None, 1)
    assert endpoint_verdict(CommitView(Verdict.GOOD, goods=2, bads=1), Verdict.GOOD, noisy=True) == (Verdict.GOOD, 0)
    assert endpoint_verdict(CommitView(Verdict.BAD, goods=0, bads=6), Verdict.GOOD, noisy=True) == (Verdict.BAD, 0)
    assert endpoint_verdict(CommitView(Verdict.BAD, goods=0, bads=5), Verdict.GOOD, noisy=True) == (None, 1)
    assert endpoint_verdict(CommitView(None, goods=9, bads=7), Verdict.BAD, noisy=True) == (Verdict.GOOD, 0)
    assert endpoint_verdict(CommitView(None, goods=8, bads=8), Verdict.BAD, noisy=True) == (Verdict.BAD, 0)
    assert binomial_tail(6, 6) == pytest.approx(1 / 64)
    decided = {"call": "bad", "lean": "bad", "n": 1, "p_value": None, "reason": "median 0.1 of 1"}
    one_sample = CommitView(Verdict.BAD, goods=0, bads=1, samples=(0.1,), decision=decided)
    assert endpoint_verdict(one_sample, Verdict.GOOD, noisy=True) == (None, 1)  # a metric's samples are its runs
    assert endpoint_verdict(one_sample, Verdict.GOOD, noisy=False) == (Verdict.BAD, 0)


def test_lazy_verification_is_the_default_and_first_a_choice():
    assert VerifyEndpoints.chosen(None) is VerifyEndpoints.LAZY
    assert VerifyEndpoints.chosen(VerifyEndpoints.FIRST) is VerifyEndpoints.FIRST
    assert depends_on(0, 1, 9) == (True, False)
    assert depends_on(8, 9, 9) == (False, True)
    assert depends_on(3, 4, 9) == (False, False)


def test_search_records_round_trip_and_bad_shapes_read_as_absent():
    records = SearchRecords(
        quarantined={"w1": "wrong"}, reference_checked=("w0", "w1"), merge_phases=(MergePhase("ab", (0, 7, 8, 3), 2),),
        confirmation=Confirmation(ConfirmStatus.CONFIRMED, 0.01, 4, 0, "reproduced"), decisions={"ab": {"n": 3}},
        flake_seen=True, analysis=Analysis.PENDING, endpoints={"good": EndpointCheck.ASSUMED},
    )  # fmt: skip
    assert SearchRecords.from_extra(records.to_extra()) == records
    assert records.to_extra("analysis") == {"analysis": "pending"}
    junk = {"quarantined": [1], "merge_phases": [{"merge": 3}], "confirmation": {"status": "?"}, "analysis": 5}
    assert SearchRecords.from_extra(junk) == SearchRecords()
    with pytest.raises(ValueError, match="not a search record"):
        records.to_extra("resumed_with")
    stored_before_octopus_descent = {"merge_phases": [{"merge": "ab", "order": [0, 7, 3]}]}  # its second parent
    assert SearchRecords.from_extra(stored_before_octopus_descent).merge_phases == (MergePhase("ab", (0, 7, 3), 1),)


def test_search_steps_go_first_to_the_worker_the_executor_prefers():
    from bisector.core.actions import Submit
    from bisector.core.decide import SearchCore

    asked: list[tuple[str, list[str]]] = []

    def prefer(sha: str, workers: list[str]) -> list[str]:
        asked.append((sha, list(workers)))
        return sorted(workers, reverse=True)  # as an executor would put the workers that hold sha's image first

    plain = SearchCore(1, _ledger(), SearchRecords(), verify=VerifyEndpoints.LAZY)
    placed = SearchCore(1, _ledger(), SearchRecords(), verify=VerifyEndpoints.LAZY, prefer=prefer)
    first = [a for a in plain.decide(["w0", "w1", "w2"], ["w0", "w1", "w2"]) if isinstance(a, Submit)]
    preferred = [a for a in placed.decide(["w0", "w1", "w2"], ["w0", "w1", "w2"]) if isinstance(a, Submit)]
    assert [s.position for s in preferred] == [s.position for s in first]
    assert first[0].worker == "w0"
    assert preferred[0].worker == "w2"
    assert asked[0] == (f"{first[0].position:040x}", ["w0", "w1", "w2"])


@pytest.mark.parametrize("victim", ["probe", "endpoint"])
def test_search_runs_are_preemptible_and_a_preempted_one_counts_as_not_run(victim: str):
    from dataclasses import replace

    from bisector.core.actions import Submit
    from bisector.core.decide import SearchCore
    from bisector.vocab.domain import StepResult

    core = SearchCore(1, _ledger(), SearchRecords(), verify=VerifyEndpoints.FIRST)
    workers = ["w0", "w1", "w2", "w3"]
    submits = [a for a in core.decide(workers, workers) if isinstance(a, Submit)]
    assert {0, 5} <= {s.position for s in submits}  # both endpoint checks and probes between them
    assert all(s.preemptible for s in submits)
    for step_id, submit in enumerate(submits, start=1):
        step = replace(_step(step_id, submit.position, Verdict.GOOD), verdict=None, finished=None, worker=submit.worker)
        core.started(step, submit)
    target = next(s for s in submits if (s.position in (0, 5)) == (victim == "endpoint"))
    preempted = submits.index(target) + 1
    detail = "preempted: its slot went to bisect 2, which held none (not a verdict; it may run again)"
    core.took(StepResult(preempted, f"{target.position:040x}", Verdict.CANCELLED, detail=detail), NOW)
    assert core.ledger.verdict(target.position) is None
    assert not core.ledger.needs_retry(target.position)  # not a failure of the commit
    assert core.harness_failures == []  # nor of the harness
    again = [a for a in core.decide([target.worker], workers) if isinstance(a, Submit)]
    assert [(s.position, s.preemptible) for s in again] == [(target.position, True)]  # run again


def test_a_noisy_answer_is_confirmed_while_results_come_back_one_at_a_time():
    """At four workers a noisy search keeps probing all it can (here: its boundary too); the confirmation must still
    get its turn."""
    from collections import deque
    from dataclasses import replace

    from bisector.core.actions import Finish, Submit
    from bisector.core.decide import SearchCore
    from bisector.vocab.domain import BisectStatus, StepResult

    core = SearchCore(1, _ledger(strategy="noisy", workers=4), SearchRecords(), verify=VerifyEndpoints.LAZY)
    workers, running, runs = ["w0", "w1", "w2", "w3"], deque[tuple[StepRecord, Verdict]](), dict[int, int]()
    for step_id in range(1, 200):
        actions = core.decide([w for w in workers if w not in {s.worker for s, _ in running}], workers)
        if finish := next((a for a in actions if isinstance(a, Finish)), None):
            break
        for submit in (a for a in actions if isinstance(a, Submit)):
            runs[submit.position] = runs.get(submit.position, 0) + 1
            flaky = submit.position == 3 and runs[3] == 1  # one spurious failure before the culprit, 4
            verdict = Verdict.BAD if submit.position >= 4 or flaky else Verdict.GOOD
            step = replace(_step(step_id * 10 + len(running), submit.position, verdict), worker=submit.worker)
            core.started(replace(step, verdict=None), submit)
            running.append((step, verdict))
        step, verdict = running.popleft()  # the others still run
        core.took(StepResult(step.id, step.sha, verdict), NOW)
    assert finish is not None, f"no answer after {sum(runs.values())} runs: {runs}"
    assert (finish.status, finish.first_bad) == (BisectStatus.FOUND, f"{4:040x}")


@pytest.mark.parametrize("find_fix", [False, True])
def test_each_sample_of_a_decided_metric_is_an_observation_on_its_side(find_fix: bool):
    from dataclasses import replace

    threshold = [replace(_step(i, 2, Verdict.MEASURED), samples=(s,)) for i, s in enumerate([9.0, 8.0, 2.0], 1)]
    view = _ledger(threshold, metric="m: (.*)", expect=">= 5", repeat=3, find_fix=find_fix).view(2)
    assert view.verdict is (Verdict.BAD if find_fix else Verdict.GOOD)
    assert (view.goods, view.bads) == ((1, 2) if find_fix else (2, 1))
    ends = {0: (10.0, 10.5, 9.5, 10.2, 9.8), 5: (5.0, 5.5, 4.5, 5.2, 4.8), 2: (5.1, 4.9, 5.3, 4.7, 9.9)}
    steps = [
        replace(_step(10 * p + i, p, Verdict.MEASURED), samples=(s,)) for p, samples in ends.items()
        for i, s in enumerate(samples)
    ]  # fmt: skip
    view = _ledger(steps, metric="m: (.*)", expect="auto", direction="higher", repeat=5).view(2)
    assert (view.verdict, view.goods, view.bads) == (Verdict.BAD, 1, 4)  # one sample nearer the good endpoint


def test_a_worker_that_fails_every_run_is_found_out_not_believed_about_an_endpoint():
    """Runs of one commit go to workers that have not run it yet (waiting for one unless every worker has): a broken
    worker then disagrees with a healthy one, which puts both under check and quarantines it."""
    from collections import deque
    from dataclasses import replace

    from bisector.core.actions import Finish, Submit
    from bisector.core.decide import SearchCore
    from bisector.vocab.domain import BisectStatus, StepResult

    core = SearchCore(1, _ledger(strategy="noisy", workers=3), SearchRecords(), verify=VerifyEndpoints.LAZY)
    workers, running = ["w0", "w1", "w2"], deque[tuple[StepRecord, Verdict]]()
    for step_id in range(1, 200):
        actions = core.decide([w for w in workers if w not in {s.worker for s, _ in running}], workers)
        if finish := next((a for a in actions if isinstance(a, Finish)), None):
            break
        for submit in (a for a in actions if isinstance(a, Submit)):
            broken = submit.worker == "w0"  # a slot whose every test fails
            verdict = Verdict.BAD if submit.position >= 3 or broken else Verdict.GOOD
            step = replace(_step(step_id * 10 + len(running), submit.position, verdict), worker=submit.worker)
            core.started(replace(step, verdict=None, purpose=submit.purpose), submit)
            running.append((step, verdict))
        step, verdict = running.popleft()
        core.took(StepResult(step.id, step.sha, verdict), NOW)
    assert finish is not None
    assert (finish.status, finish.first_bad) == (BisectStatus.FOUND, f"{3:040x}"), finish.message
    assert list(core.ledger.quarantined) == ["w0"]


def test_an_ambiguous_answer_is_confirmed_as_a_found_one_is():
    """Skips beside the boundary leave a range; where confirmation is wanted its ends are re-run in pairs as a found
    culprit and its parent are, so a flake that put the range in the wrong place is caught (here commit 2 fails once,
    commit 1 cannot be tested, and the culprit is 4, after the untestable 3)."""
    from dataclasses import replace

    from bisector.core.actions import Finish, Submit
    from bisector.core.decide import SearchCore
    from bisector.vocab.domain import BisectStatus, StepResult

    core = SearchCore(1, _ledger(strategy="noisy"), SearchRecords(), verify=VerifyEndpoints.LAZY)
    runs: dict[int, int] = {}
    for step_id in range(1, 100):
        actions = core.decide(["w0"], ["w0"])
        if finish := next((a for a in actions if isinstance(a, Finish)), None):
            break
        submit = next(a for a in actions if isinstance(a, Submit))
        runs[submit.position] = runs.get(submit.position, 0) + 1
        if submit.position in (1, 3):
            verdict = Verdict.SKIP
        else:
            flaky = submit.position == 2 and runs[2] == 1
            verdict = Verdict.BAD if submit.position >= 4 or flaky else Verdict.GOOD
        step = replace(_step(step_id, submit.position, verdict), verdict=None, purpose=submit.purpose)
        core.started(step, submit)
        core.took(StepResult(step_id, step.sha, verdict), NOW)
    assert finish is not None
    assert (finish.status, finish.last_good, finish.first_bad) == (BisectStatus.AMBIGUOUS, f"{2:040x}", f"{4:040x}")


# (position, worker, purpose, runs of that position before this one) -> the run's verdict and metric samples
RunAnswer = Callable[[int, str, StepPurpose, int], tuple[Verdict, tuple[float, ...]]]


@dataclass
class _Stored:
    """What the store holds of a bisect driven by `_drive`: its steps and the records the core asked to store."""

    steps: dict[int, StepRecord] = field(default_factory=dict)
    records: SearchRecords = field(default_factory=SearchRecords)


def _core(ledger: Ledger, stored: _Stored) -> SearchCore:
    """The core as `bisect start` (nothing stored) or `bisect resume` builds it from what is stored: steps still
    running when the coordinator stopped come back interrupted."""
    steps = [
        replace(s, verdict=Verdict.ERROR, error_kind=ErrorKind.INTERRUPTED) if s.verdict is None else s
        for s in stored.steps.values()
    ]
    fresh = Ledger(ledger.spec, ledger.candidates, ledger.bad_sha, steps)
    return SearchCore(1, fresh, stored.records, stored=steps, verify=VerifyEndpoints.chosen(None))


def _drive(
    core: SearchCore, workers: list[str], answer: RunAnswer, stored: _Stored, *, stop_after: int = 1000
) -> Finish | None:
    """Fill the free workers as the core asks, take one result back per pass (the oldest), store what the loop
    stores; stop at the core's Finish or after `stop_after` results (the coordinator killed there)."""
    running: deque[tuple[StepRecord, Verdict, tuple[float, ...]]] = deque()
    runs: dict[int, int] = {}
    for _ in range(stop_after):
        actions = core.decide([w for w in workers if w not in {s.worker for s, _, _ in running}], workers)
        for action in actions:
            if isinstance(action, Record):
                stored.records = replace(stored.records, **{n: getattr(action.records, n) for n in action.names})
            elif isinstance(action, Finish):
                if action.records is not None:
                    stored.records = action.records
                return action
            elif isinstance(action, Submit):
                verdict, samples = answer(action.position, action.worker, action.purpose, runs.get(action.position, 0))
                runs[action.position] = runs.get(action.position, 0) + 1
                step = replace(
                    _step(len(stored.steps) + 1, action.position, verdict), verdict=None, finished=None,
                    worker=action.worker, purpose=action.purpose, sha=core.ledger.candidates[action.position].sha,
                )  # fmt: skip
                stored.steps[step.id] = step
                core.started(step, action)
                running.append((step, verdict, samples))
        if not running:
            return None
        step, verdict, samples = running.popleft()
        stored.steps[step.id] = replace(step, verdict=verdict, samples=samples, finished=NOW)
        core.took(StepResult(step.id, step.sha, verdict, samples=samples, worker=step.worker), NOW)
    return None


def test_a_resumed_bisect_confirms_after_a_flake_its_quarantined_worker_gave_as_the_whole_one_does():
    """w1's test passes everywhere: its good at commit 3 after w0's bad at 2 is a flake (good after bad); only once w0
    runs 3 too do the two disagree on one commit, and the reference check quarantines w1, which takes the flake out
    of the evidence. The uninterrupted bisect confirms its answer (a flake was seen); a bisect resumed after the
    quarantine decides the same, from what was stored when the flake was seen."""

    def answer(position: int, worker: str, purpose: StepPurpose, run: int) -> tuple[Verdict, tuple[float, ...]]:
        return (Verdict.BAD if position >= 2 and worker != "w1" else Verdict.GOOD), ()

    workers = ["w0", "w1"]
    whole = _Stored()
    finish = _drive(SearchCore(1, _ledger(workers=2), SearchRecords()), workers, answer, whole)
    assert finish is not None
    assert finish.first_bad == f"{2:040x}"
    assert "w1" in whole.records.quarantined
    assert whole.records.flake_seen
    assert any(s.purpose is StepPurpose.CONFIRM for s in whole.steps.values())
    quarantined_after = next(i for i in range(1, len(whole.steps)) if _drive_to(i, workers, answer).records.quarantined)
    cut = _drive_to(quarantined_after, workers, answer)
    resumed = _drive(_core(_ledger(workers=2), cut), workers, answer, cut)
    assert resumed is not None
    assert (resumed.status, resumed.first_bad, resumed.message) == (finish.status, finish.first_bad, finish.message)
    assert cut.records.confirmation == whole.records.confirmation


def _drive_to(results: int, workers: list[str], answer: RunAnswer) -> _Stored:
    stored = _Stored()
    _drive(SearchCore(1, _ledger(workers=len(workers)), SearchRecords()), workers, answer, stored, stop_after=results)
    return stored


def test_a_boundary_that_does_not_reproduce_is_worded_from_the_commits_re_run_not_a_parent():
    """--prune auto took commit 2 out of the search (the test cannot see it): the search's boundary is (1, 3], and the
    confirmation re-runs 3 against 1, not against 3's parent 2. Metric samples (--repeat 3, threshold 5) whose medians
    sit either side of the threshold but whose sets do not differ: not reproducible."""
    from bisector.core.prune import CommitReach, PrunePlan, Reach
    from bisector.vocab.domain import BisectStatus

    values = {0: [6.0], 1: [5.1, 5.1, 4.0], 3: [4.9, 4.9, 6.0], 4: [4.0], 5: [4.0]}

    def answer(position: int, worker: str, purpose: StepPurpose, run: int) -> tuple[Verdict, tuple[float, ...]]:
        cycle = values[position]
        return Verdict.MEASURED, (cycle[run % len(cycle)],)

    pruned = PrunePlan(True, "pruned 1 of 6 commits", {"2" * 40: CommitReach(Reach.UNSEEN, "1" * 40)})
    stored = _Stored(records=SearchRecords(pruning=pruned))
    core = SearchCore(1, _ledger(short_shas=True, metric="m: (.*)", expect=">= 5", repeat=3), stored.records)
    finish = _drive(core, ["w0"], answer, stored)
    assert finish is not None
    assert (finish.status, finish.last_good, finish.first_bad) == (BisectStatus.NOT_REPRODUCIBLE, "1" * 40, "3" * 40)
    assert (
        f"{'3' * 12} looked like the first bad commit, but re-running it against {'1' * 12} did not" in finish.message
    )
    assert stored.records.confirmation is not None
    assert " run(s) of the last good commit and " in stored.records.confirmation.reason
    assert "parent" not in finish.message


def test_expect_auto_samples_the_endpoints_up_to_max_repeat_before_calling_them_alike():
    """--expect auto --repeat 5 --max-repeat 20: the endpoints' first five samples overlap (p >= 0.01), so both are
    sampled again, doubling (5 -> 11 -> 20) as an uncertain commit is, until they differ: a regression whose first
    samples overlap is found, and endpoints that never differ end `endpoints_mismatch` only at 20 samples each."""
    from bisector.vocab.domain import BisectStatus

    first = {0: [10.0, 10.0, 10.0, 10.0, 8.0], 5: [8.0, 8.0, 8.0, 8.0, 10.0]}

    def regression(position: int, worker: str, purpose: StepPurpose, run: int) -> tuple[Verdict, tuple[float, ...]]:
        level = 8.0 if position >= 3 else 10.0
        return Verdict.MEASURED, (first[position][run] if run < 5 and position in first else level + run / 100,)

    def alike(position: int, worker: str, purpose: StepPurpose, run: int) -> tuple[Verdict, tuple[float, ...]]:
        return Verdict.MEASURED, (10.0 + (run % 3) / 10,)

    spec = {"metric": "m: (.*)", "expect": "auto", "direction": "higher", "repeat": 5, "max_repeat": 20}
    found = _Stored()
    finish = _drive(SearchCore(1, _ledger(**spec), SearchRecords()), ["w0"], regression, found)
    assert finish is not None
    assert (finish.status, finish.first_bad) == (BisectStatus.FOUND, f"{3:040x}"), finish.message
    at_ends = [sum(1 for s in found.steps.values() if s.sha == f"{p:040x}") for p in (0, 5)]
    assert min(at_ends) > 5  # both sampled past --repeat (compared as samples come in: one may stop short of 11)
    assert max(at_ends) <= 11
    spent = _Stored()
    finish = _drive(SearchCore(1, _ledger(**spec), SearchRecords()), ["w0"], alike, spent)
    assert finish is not None
    assert finish.status is BisectStatus.ENDPOINTS_MISMATCH
    assert "do not differ" in finish.message
    assert "20 and 20 samples" in finish.message


def _reference_runs(health: Health, worker: str, good: str, bad: str) -> str | None:
    """Run the reference runs the worker owes, one at a time, until it owes none; the answers at each endpoint come
    from `good` and `bad` in turn (r: right, w: wrong, e: an infrastructure error), which must all be used. Returns
    the quarantine reason, if any."""
    answers = {0: iter(good), 5: iter(bad)}
    reason, step_id = None, 0
    while (check := health.next_check(worker)) is not None:
        step_id += 1
        health.in_flight[step_id] = check
        wrong = Verdict.BAD if check.expected is Verdict.GOOD else Verdict.GOOD
        reason = health.result(
            step_id, {"r": check.expected, "w": wrong, "e": Verdict.ERROR}[next(answers[check.position])]
        )
    assert [list(rest) for rest in answers.values()] == [[], []]
    return reason


def test_a_worker_is_judged_at_each_endpoint_apart_and_runs_on_while_the_evidence_is_ambiguous():
    """At a flake rate of 10% the margin is 4 ((0.1 / 0.9) ** 4 < ALPHA). Four wrong answers in the first six, three
    in a row at the bad endpoint, ask for more runs there, not a quarantine; each endpoint is cleared once its right
    answers outnumber its wrong ones by 3 (an error runs again). Wrong answers at one endpoint, however right the
    other, quarantine at the margin."""
    from bisector.core.health import ALPHA, margin

    assert (margin(0.0), margin(0.1), margin(0.2), margin(0.45)) == (3, 4, 5, 6)
    assert (0.1 / 0.9) ** 4 < ALPHA < (0.1 / 0.9) ** 3
    flaky = Health(_ledger(), ["w1"], lambda: 0.1)
    assert flaky.judge("w1") is None
    assert _reference_runs(flaky, "w1", good="wrrerr", bad="wwwrrrrrr") is None
    broken = Health(_ledger(), ["w2"], lambda: 0.1)
    broken.judge("w2")
    reason = _reference_runs(broken, "w2", good="wwww", bad="rrr")
    assert reason == (
        "reference check: 4 of 4 runs of the known good commit on w2 answered wrong, 4 more than right; a healthy "
        "worker answers wrong only when the test flakes (in about 10% of runs so far)"
    )
