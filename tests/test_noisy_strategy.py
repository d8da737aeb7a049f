"""NoisyBisect: exact on reliable tests (and as cheap as k-ary), accurate on flaky ones; its posterior and probes."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simulate import ConfirmPolicy, History, SimStatus, simulate

from bisector.core.strategies import (
    CulpritPosterior,
    KArySearch,
    NoisyBisect,
    OutcomeKind,
    SearchState,
    choose_strategy,
    is_consistent,
)
from bisector.vocab.domain import Verdict
from bisector.vocab.errors import InputError


@given(
    size=st.integers(min_value=2, max_value=1200),
    data=st.data(),
    slots=st.integers(min_value=1, max_value=16),
    seed=st.integers(min_value=0, max_value=2**16),
)
@settings(max_examples=200, deadline=None)
def test_finds_exactly_the_first_bad_commit_without_noise(size, data, slots, seed):
    culprit = data.draw(st.integers(min_value=1, max_value=size - 1))
    result = simulate(NoisyBisect(), History(size, culprit), slots=slots, seed=seed)
    assert result.status is SimStatus.FOUND
    assert (result.last_good, result.first_bad) == (culprit - 1, culprit)
    assert result.confidence == 1.0


@given(size=st.integers(min_value=2, max_value=1200), data=st.data())
@settings(max_examples=200, deadline=None)
def test_one_slot_without_flakes_uses_at_most_ceil_log2_runs(size, data):
    culprit = data.draw(st.integers(min_value=1, max_value=size - 1))
    result = simulate(NoisyBisect(), History(size, culprit))
    assert result.runs <= (math.ceil(math.log2(size - 1)) if size > 2 else 0)


@given(
    size=st.integers(min_value=2, max_value=1200),
    data=st.data(),
    slots=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=2**16),
)
@settings(max_examples=100, deadline=None)
def test_without_flakes_it_costs_exactly_what_kary_costs(size, data, slots, seed):
    culprit = data.draw(st.integers(min_value=1, max_value=size - 1))
    history = History(size, culprit)
    ours = simulate(NoisyBisect(), history, slots=slots, seed=seed)
    kary = simulate(KArySearch(), history, slots=slots, seed=seed)
    assert (ours.runs, ours.rounds, ours.first_bad) == (kary.runs, kary.rounds, kary.first_bad)


@given(size=st.integers(min_value=3, max_value=300), data=st.data(), slots=st.integers(min_value=1, max_value=8))
@settings(max_examples=100, deadline=None)
def test_skips_without_flakes_give_the_git_bisect_answer(size, data, slots):
    culprit = data.draw(st.integers(min_value=1, max_value=size - 1))
    skips = frozenset(data.draw(st.sets(st.integers(min_value=1, max_value=size - 2), max_size=size // 2)))
    result = simulate(NoisyBisect(), History(size, culprit, skips=skips), slots=slots)
    expected_lo = max(p for p in range(culprit) if p not in skips)
    expected_hi = min(p for p in range(culprit, size) if p not in skips)
    assert (result.last_good, result.first_bad) == (expected_lo, expected_hi)
    assert result.status is (SimStatus.FOUND if expected_hi == expected_lo + 1 else SimStatus.AMBIGUOUS)


@pytest.mark.parametrize("slots", [1, 4])
def test_ten_percent_flakes_are_found_at_least_95_percent_of_the_time(slots):
    bisects = 200
    results = [
        simulate(
            NoisyBisect(),
            History(1001, 1 + (seed * 7919) % 1000, flake_rate=0.10),
            slots=slots,
            seed=seed,
            confirm=ConfirmPolicy(),
        )
        for seed in range(bisects)
    ]
    assert sum(r.correct for r in results) >= 0.95 * bisects


def test_flaky_answers_carry_their_posterior_confidence():
    result = simulate(NoisyBisect(), History(300, 120, flake_rate=0.1), seed=3, confirm=ConfirmPolicy())
    assert result.confidence is not None
    assert 0.95 <= result.confidence <= 1.0


def test_consistent_observations_mean_no_flake():
    assert is_consistent(10, {0: (1, 0), 3: (2, 0), 4: (0, 3), 9: (0, 1)})
    assert not is_consistent(10, {4: (1, 1)})  # one commit seen both ways
    assert not is_consistent(10, {3: (0, 1), 6: (1, 0)})  # good after bad
    assert not is_consistent(10, {0: (0, 1)})  # the good endpoint seen bad
    assert not is_consistent(10, {9: (1, 0)})  # the bad endpoint seen good


def test_observations_default_to_the_verdicts():
    state = SearchState(10, {0: Verdict.GOOD, 4: Verdict.BAD, 2: Verdict.SKIP}, observations={4: (1, 2), 6: (0, 0)})
    assert state.observed() == {0: (1, 0), 4: (1, 2)}


def test_learned_flake_rate_is_zero_until_a_contradiction():
    strategy = NoisyBisect()
    clean = SearchState(101, {0: Verdict.GOOD, 100: Verdict.BAD, 50: Verdict.BAD, 25: Verdict.GOOD})
    assert strategy.flake_rate(clean) == 0.0
    flaky = SearchState(101, {0: Verdict.GOOD, 100: Verdict.BAD}, observations={50: (2, 1), 25: (3, 0)})
    assert 0.05 < strategy.flake_rate(flaky) < 0.5


def test_posterior_sums_to_one_and_follows_the_evidence():
    posterior = CulpritPosterior(101, {0: (1, 0), 100: (0, 1), 50: (4, 1), 60: (0, 5)})
    assert posterior.cdf(0) == 0.0
    assert posterior.cdf(100) == 1.0
    # Mostly good at 50, bad at 60: the culprit is most likely in 51..60.
    assert posterior.cdf(60) - posterior.cdf(50) > 0.8
    assert all(posterior.cdf(x) <= posterior.cdf(x + 1) for x in range(100))
    assert posterior.position_at(0.5) in range(51, 61)


observation_maps = st.integers(min_value=2, max_value=400).flatmap(
    lambda size: st.tuples(
        st.just(size),
        st.dictionaries(
            st.integers(min_value=0, max_value=size - 1),
            st.tuples(st.integers(min_value=0, max_value=30), st.integers(min_value=0, max_value=30)),
            max_size=25,
        ),
        st.frozensets(st.integers(min_value=1, max_value=max(1, size - 2)), max_size=10),
    )
)


@given(case=observation_maps, quantile=st.floats(min_value=0.001, max_value=0.999))
@settings(max_examples=300, deadline=None)
def test_posterior_is_a_distribution_and_its_quantiles_invert_its_cdf(case, quantile):
    size, observations, skipped = case
    posterior = CulpritPosterior(size, observations, skipped - set(observations))
    cdf = [posterior.cdf(x) for x in range(size)]
    assert cdf[0] == 0.0
    assert cdf[-1] == 1.0
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(cdf))
    x = posterior.position_at(quantile)
    assert 1 <= x <= size - 1
    assert cdf[x] >= quantile - 1e-9
    assert cdf[x - 1] < quantile + 1e-9
    best = posterior.best_range()
    assert 0.0 < best.mass <= 1.0 + 1e-9
    assert 0 <= best.last_good < best.first_bad <= size - 1
    assert 0.0 < posterior.flake_rate() < 1.0


@given(case=observation_maps, data=st.data(), free_slots=st.integers(min_value=0, max_value=12))
@settings(max_examples=300, deadline=None)
def test_probes_are_distinct_testable_and_not_in_flight(case, data, free_slots):
    size, observations, skipped = case
    in_flight = frozenset(data.draw(st.sets(st.integers(min_value=0, max_value=size - 1), max_size=6)))
    verdicts = dict.fromkeys(skipped, Verdict.SKIP)
    state = SearchState(size, verdicts, in_flight, observations)
    strategy = NoisyBisect()
    probes = strategy.next_probes(state, free_slots)
    assert len(probes) == len(set(probes)) <= free_slots
    untestable = {p for p in skipped if p not in state.observed()}
    assert all(1 <= p <= size - 2 and p not in in_flight and p not in untestable for p in probes)
    outcome = strategy.outcome(state)
    if outcome is not None:
        assert outcome.confidence is not None
        assert outcome.confidence >= strategy.confidence


def test_posterior_handles_thousands_of_positions_and_heavy_evidence():
    observations = {p: (40, 3) if p < 2500 else (3, 40) for p in range(10, 4990, 10)}
    posterior = CulpritPosterior(5000, observations)
    best = posterior.best_range()
    assert 2490 < best.first_bad <= 2500
    assert best.mass > 0.0
    assert 0.0 < posterior.flake_rate() < 0.2


def test_a_culprit_at_the_bad_endpoint_is_not_explained_away_by_flipped_labels():
    """All probes good, the bad endpoint once flaky: "every commit bad, ε = 0.9" must not keep any mass."""
    observations = {p: (1, 0) for p in (0, 500, 750, 875, 937, 969, 985, 993, 996, 997)}
    observations |= {999: (30, 2), 1000: (1, 1)}
    state = SearchState(1001, {}, observations=observations)
    outcome = NoisyBisect().outcome(state)
    assert outcome is not None
    assert (outcome.kind, outcome.last_good, outcome.first_bad) == (OutcomeKind.FOUND, 999, 1000)
    assert NoisyBisect().flake_rate(state) < 0.2


def test_skips_beside_the_boundary_give_a_range():
    # culprit somewhere in 4..6: 4 and 5 are skipped, 3 is solidly good and 6 solidly bad.
    state = SearchState(
        10,
        {0: Verdict.GOOD, 9: Verdict.BAD, 4: Verdict.SKIP, 5: Verdict.SKIP},
        observations={3: (9, 1), 6: (1, 9), 0: (1, 0), 9: (0, 1)},
    )
    outcome = NoisyBisect(confidence=0.9).outcome(state)
    assert outcome is not None
    assert outcome.kind is OutcomeKind.AMBIGUOUS
    assert (outcome.last_good, outcome.first_bad) == (3, 6)


def test_noisy_probes_sit_at_posterior_quantiles_and_avoid_in_flight_and_skips():
    state = SearchState(
        101,
        {0: Verdict.GOOD, 100: Verdict.BAD, 30: Verdict.SKIP},
        frozenset({50}),
        observations={40: (1, 1)},
    )
    probes = NoisyBisect().next_probes(state, 5)
    assert len(probes) == len(set(probes)) == 5
    assert all(1 <= p <= 99 and p not in (30, 50) for p in probes)
    assert probes == sorted(probes)


def test_a_concentrated_posterior_also_tests_the_commit_before_its_mode():
    # 42 is solidly bad and 41 barely tested: the next probe must look at 41, not 42 again.
    state = SearchState(101, {}, observations={0: (1, 0), 100: (0, 1), 41: (1, 1), 42: (0, 6), 40: (5, 0)})
    assert NoisyBisect().next_probes(state, 1) == [41]


def test_choose_strategy():
    assert isinstance(choose_strategy(None, repeats=1, flake_seen=False), KArySearch)
    assert isinstance(choose_strategy(None, repeats=3, flake_seen=False), NoisyBisect)
    assert isinstance(choose_strategy(None, repeats=1, flake_seen=True), NoisyBisect)
    assert isinstance(choose_strategy("kary", repeats=5, flake_seen=True), KArySearch)
    assert isinstance(choose_strategy("noisy", repeats=1, flake_seen=False), NoisyBisect)
    with pytest.raises(InputError, match="unknown"):
        choose_strategy("ternary", repeats=1, flake_seen=False)


def test_confidence_must_be_a_probability_above_half():
    with pytest.raises(ValueError, match="confidence"):
        NoisyBisect(confidence=1.0)
