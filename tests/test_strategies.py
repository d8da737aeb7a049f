"""Property tests of the pure search strategies over generated histories and worker counts."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bisector.core.strategies import KArySearch, OutcomeKind, SearchState
from bisector.vocab.domain import Verdict


def simulate(size: int, first_bad: int, workers: int, skips: frozenset[int] = frozenset(), seed: int = 0):
    """Run the strategy to its outcome; steps finish in a random order. Returns (outcome, steps, rounds)."""
    rng = random.Random(seed)
    strategy = KArySearch()
    verdicts: dict[int, Verdict] = {0: Verdict.GOOD, size - 1: Verdict.BAD}
    in_flight: list[int] = []
    steps = rounds = 0
    while True:
        state = SearchState(size, dict(verdicts), frozenset(in_flight))
        outcome = strategy.outcome(state)
        if outcome is not None:
            return outcome, steps, rounds
        probes = strategy.next_probes(state, workers - len(in_flight))
        assert len(probes) == len(set(probes))
        assert all(p not in verdicts and p not in in_flight for p in probes)
        in_flight.extend(probes)
        assert in_flight, "no outcome and nothing to run"
        rounds += 1 if probes else 0
        done = in_flight.pop(rng.randrange(len(in_flight)))
        steps += 1
        if done in skips:
            verdicts[done] = Verdict.SKIP
        else:
            verdicts[done] = Verdict.BAD if done >= first_bad else Verdict.GOOD


@given(
    size=st.integers(min_value=2, max_value=1200),
    data=st.data(),
    workers=st.integers(min_value=1, max_value=16),
    seed=st.integers(min_value=0, max_value=2**16),
)
@settings(max_examples=300, deadline=None)
def test_finds_exactly_the_first_bad_commit(size, data, workers, seed):
    first_bad = data.draw(st.integers(min_value=1, max_value=size - 1))
    outcome, _, _ = simulate(size, first_bad, workers, seed=seed)
    assert outcome.kind is OutcomeKind.FOUND
    assert outcome.first_bad == first_bad
    assert outcome.last_good == first_bad - 1


@given(
    size=st.integers(min_value=3, max_value=300),
    data=st.data(),
    workers=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=2**16),
)
@settings(max_examples=300, deadline=None)
def test_skips_give_the_git_bisect_answer(size, data, workers, seed):
    first_bad = data.draw(st.integers(min_value=1, max_value=size - 1))
    skips = frozenset(data.draw(st.sets(st.integers(min_value=1, max_value=size - 2), max_size=size // 2)))
    outcome, _, _ = simulate(size, first_bad, workers, skips, seed)
    # The answer: the last testable commit before the culprit and the first testable one from it on.
    expected_lo = max(p for p in range(first_bad) if p not in skips)
    expected_hi = min(p for p in range(first_bad, size) if p not in skips)
    assert (outcome.last_good, outcome.first_bad) == (expected_lo, expected_hi)
    expected_kind = OutcomeKind.FOUND if expected_hi == expected_lo + 1 else OutcomeKind.AMBIGUOUS
    assert outcome.kind is expected_kind


def test_skip_right_beside_the_culprit_is_ambiguous_not_a_guess():
    outcome, _, _ = simulate(10, first_bad=5, workers=1, skips=frozenset({4}))
    assert outcome.kind is OutcomeKind.AMBIGUOUS
    assert (outcome.last_good, outcome.first_bad) == (3, 5)


def test_one_worker_uses_at_most_ceil_log2_steps():
    for size in (2, 3, 17, 100, 1001):
        for first_bad in range(1, size, max(1, size // 37)):
            _, steps, _ = simulate(size, first_bad, workers=1)
            assert steps <= math.ceil(math.log2(size - 1)) if size > 2 else steps == 0


def rounds_when_steps_take_equal_time(size: int, first_bad: int, workers: int) -> int:
    """Wall time in step durations: every slot refilled when a batch ends, irrelevant probes dropped."""
    strategy = KArySearch()
    verdicts: dict[int, Verdict] = {0: Verdict.GOOD, size - 1: Verdict.BAD}
    rounds = 0
    while strategy.outcome(SearchState(size, dict(verdicts))) is None:
        probes = strategy.next_probes(SearchState(size, dict(verdicts)), workers)
        rounds += 1
        for p in probes:
            verdicts[p] = Verdict.BAD if p >= first_bad else Verdict.GOOD
    return rounds


def test_w_workers_take_about_log_base_w_plus_1_rounds():
    size = 1001
    for workers in (1, 2, 3, 4, 8, 16):
        worst = max(rounds_when_steps_take_equal_time(size, fb, workers) for fb in range(1, size, 7))
        bound = next(r for r in range(64) if (workers + 1) ** r >= size - 1)  # ceil(log_{W+1} n), exactly
        assert worst <= bound, (workers, worst, bound)


def test_fresh_probes_leave_parts_that_later_rounds_settle_soonest():
    """100 suspects, 3 slots: three parts of 16 (two more 4-way rounds settle each) and one of 52; one slot: halves."""
    state = SearchState(101, {0: Verdict.GOOD, 100: Verdict.BAD})
    assert KArySearch().next_probes(state, 3) == [52, 68, 84]
    assert KArySearch().next_probes(state, 1) == [50]


def test_a_freed_slot_goes_to_the_largest_open_segment():
    state = SearchState(101, {0: Verdict.GOOD, 100: Verdict.BAD}, frozenset({25, 50, 75}))
    (probe,) = KArySearch().next_probes(state, 1)
    assert 1 <= probe < 100
    assert probe not in (25, 50, 75)


def test_nothing_to_probe_when_everything_is_in_flight():
    state = SearchState(4, {0: Verdict.GOOD, 3: Verdict.BAD}, frozenset({1, 2}))
    assert KArySearch().next_probes(state, 4) == []
    assert KArySearch().outcome(state) is None
