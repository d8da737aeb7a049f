"""Which commits the search will likely probe next (what the loop builds ahead): pure, no git, no store."""

from __future__ import annotations

from datetime import UTC, datetime

from bisector.core.actions import Submit
from bisector.core.decide import SearchCore
from bisector.core.ledger import Ledger
from bisector.core.lookahead import likely_probes, still_open
from bisector.core.options import VerifyEndpoints
from bisector.core.records import SearchRecords
from bisector.core.spec import BisectSpec
from bisector.vocab.domain import Commit, StepPurpose, StepRecord, StepResult, Verdict

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _core(size: int, verify: VerifyEndpoints = VerifyEndpoints.LAZY) -> SearchCore:
    candidates = [Commit(i, f"{i:040x}", f"change {i}", "a", NOW) for i in range(size)]
    spec = BisectSpec.from_options({"repo": "/nowhere", "good": "a", "bad": "b", "run": "true"})
    return SearchCore(1, Ledger(spec, candidates, candidates[-1].sha, []), SearchRecords(), verify=verify)


def _send(core: SearchCore, workers: list[str], first_id: int) -> list[int]:
    """Carry out one pass's submits as the loop would; the positions sent."""
    sent = []
    submits = [a for a in core.decide(workers, workers) if isinstance(a, Submit)]
    for step_id, action in enumerate(submits, start=first_id):
        step = StepRecord(
            id=step_id, bisect_id=1, sha=f"{action.position:040x}", attempt=1, worker=action.worker, node="",
            gpus=(), started=NOW, finished=None, build_s=None, run_s=None, exit_code=None, verdict=None, samples=(),
            log_path="", error_kind=None, detail="", purpose=action.purpose,
        )  # fmt: skip
        core.started(step, action)
        sent.append(action.position)
    return sent


def test_with_one_probe_running_the_next_is_the_middle_of_either_half():  # at W=1 the round is the probe
    core = _core(17)  # positions 0 (good) .. 16 (bad): the first probe halves them
    assert _send(core, ["w0"], 1) == [8]
    assert likely_probes(core, 2) == [4, 12]  # bad at 8: the middle of 0..8; good: the middle of 8..16
    assert likely_probes(core, 1) == [4]
    assert likely_probes(core, 6) == [4, 12, 2, 6, 10, 14]  # room for more: the successors of those, in turn
    assert len(likely_probes(core, 100)) == 14  # every commit the search could still probe, none twice
    assert likely_probes(core, 0) == []


def test_each_guess_is_the_probe_the_search_then_sends():
    core = _core(33)
    _send(core, ["w0"], 1)
    guesses = likely_probes(core, 2)
    core.took(StepResult(1, f"{16:040x}", Verdict.GOOD), NOW)
    assert _send(core, ["w0"], 2) == [guesses[1]]  # came back good: the second guess is what runs next
    may_run = still_open(core)
    assert [p for p in range(33) if may_run(f"{p:040x}")] == list(range(17, 32))  # the next probe among them
    assert not may_run(f"{guesses[0]:040x}")  # the other guess's build can stop


def test_with_a_round_running_each_way_it_can_come_back_gives_the_next_round():
    core = _core(100)
    running = _send(core, ["w0", "w1", "w2"], 1)
    assert running == sorted(running)
    every_way = likely_probes(core, 3 * 4)  # W * (W + 1): W probes after each of the W + 1 ways
    assert len(set(every_way)) == len(every_way) == 12
    assert not set(every_way) & set(running)
    for step_id, position in enumerate(running, start=1):  # the first good, the others bad: one of 4 ways
        core.took(StepResult(step_id, f"{position:040x}", Verdict.GOOD if step_id == 1 else Verdict.BAD), NOW)
    following = _send(core, ["w0", "w1", "w2"], 4)
    assert set(following) <= set(every_way)
    assert len(following) == 3


def test_a_probe_left_outside_the_boundary_is_not_guessed():
    core = _core(100)
    running = _send(core, ["w0", "w1", "w2"], 1)
    core.took(StepResult(2, f"{running[1]:040x}", Verdict.GOOD), NOW)  # the middle one: the first is now moot
    guesses = likely_probes(core, 12)
    assert guesses
    assert all(running[1] < p < 99 for p in guesses), guesses


def test_the_ways_that_leave_the_most_suspects_come_first():
    core = _core(100)
    running = _send(core, ["w0", "w1", "w2"], 1)
    likeliest = likely_probes(core, 3)
    widest = max(zip([0, *running], [*running, 99], strict=True), key=lambda span: span[1] - span[0])
    assert all(widest[0] < core.order.index(p) < widest[1] for p in likeliest)


def test_an_endpoint_check_is_guessed_to_confirm_its_end():
    core = _core(17, VerifyEndpoints.FIRST)
    assert _send(core, ["w0"], 1) == [0]  # the good end first, before any probe
    assert likely_probes(core, 1) == [8]  # confirmed good: the first probe halves the range
    core.took(StepResult(1, f"{0:040x}", Verdict.GOOD), NOW)
    assert _send(core, ["w0"], 2) == [16]
    assert likely_probes(core, 1) == [8]


def test_nothing_is_guessed_once_the_answer_is_known():
    core = _core(3)
    assert _send(core, ["w0"], 1) == [1]
    core.took(StepResult(1, f"{1:040x}", Verdict.BAD), NOW)
    assert likely_probes(core, 4) == []  # bad at 1 with 0 good: found, only the lazy endpoint check is left
    assert _send(core, ["w0"], 2) == [0]
    assert core.ledger.in_flight[2].purpose is StepPurpose.SEARCH
    assert likely_probes(core, 4) == []


def test_at_several_workers_the_first_round_is_guessed_while_the_endpoints_are_checked():
    core = _core(201, VerifyEndpoints.FIRST)
    assert _send(core, ["w0", "w1"], 1) == [0, 200]  # the endpoints take the first round of two
    first_round = likely_probes(core, 6)[:2]  # guessed confirmed: the round after them comes first
    core.took(StepResult(1, f"{0:040x}", Verdict.GOOD), NOW)
    core.took(StepResult(2, f"{200:040x}", Verdict.BAD), NOW)
    assert _send(core, ["w0", "w1"], 3) == first_round
