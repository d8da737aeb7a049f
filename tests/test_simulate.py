"""The simulator: deterministic, faithful to its history model, and honest about what each tester spends."""

from __future__ import annotations

import math

import pytest
from simulate import (
    PINPOINT_SCHEDULE,
    AdaptiveThreshold,
    ConfirmPolicy,
    EscalatingComparison,
    History,
    MajorityVote,
    SimStatus,
    SingleRun,
    simulate,
)

from bisector.core.strategies import KArySearch, NoisyBisect
from bisector.vocab.metric import Direction

TESTERS = [SingleRun(), MajorityVote(5), EscalatingComparison(alpha=0.05), AdaptiveThreshold(band=0.25)]


def test_same_seed_same_result():
    history = History(500, 123, flake_rate=0.1)
    first = simulate(NoisyBisect(), history, seed=7, slots=3, confirm=ConfirmPolicy())
    again = simulate(NoisyBisect(), history, seed=7, slots=3, confirm=ConfirmPolicy())
    assert first == again


@pytest.mark.parametrize("tester", TESTERS, ids=lambda t: type(t).__name__)
@pytest.mark.parametrize(
    "history",
    [
        History(200, 77),
        History(200, 77, noise_sigma=0.0),
        History(200, 77, noise_sigma=0.0, direction=Direction.LOWER),
        History(200, 77, find_fix=True),
        History(200, 77, noise_sigma=0.0, find_fix=True, direction=Direction.LOWER),
    ],
    ids=["pass-fail", "metric-higher", "metric-lower", "find-fix", "metric-lower-find-fix"],
)
def test_every_tester_finds_the_culprit_without_noise(tester, history):
    result = simulate(KArySearch(), history, tester)
    assert result.correct
    assert (result.last_good, result.first_bad) == (76, 77)


def test_single_runs_cost_one_run_per_probe():
    result = simulate(KArySearch(), History(1001, 400))
    assert result.runs == result.rounds <= math.ceil(math.log2(1000))


def test_majority_vote_costs_k_runs_per_probe():
    plain = simulate(KArySearch(), History(1001, 400))
    voted = simulate(KArySearch(), History(1001, 400), MajorityVote(10))
    assert voted.runs == 10 * plain.runs


def test_escalation_stops_at_the_first_stage_when_decided():
    # Without noise the first 10 samples decide; the endpoints' 10 samples each are runs too.
    plain = simulate(KArySearch(), History(1001, 400))
    escalated = simulate(KArySearch(), History(1001, 400), EscalatingComparison())
    assert escalated.runs == PINPOINT_SCHEDULE[0] * (plain.runs + 2)


def test_escalation_goes_further_when_the_sets_overlap():
    noisy = History(1001, 400, noise_sigma=1.0)
    plain_probes = math.ceil(math.log2(1000))
    result = simulate(KArySearch(), noisy, EscalatingComparison(), seed=1)
    assert result.runs > PINPOINT_SCHEDULE[0] * (plain_probes + 2)


def test_adaptive_repeats_cost_nothing_extra_on_clear_samples():
    plain = simulate(KArySearch(), History(1001, 400))
    adaptive = simulate(KArySearch(), History(1001, 400, noise_sigma=0.0), AdaptiveThreshold(band=0.25))
    assert adaptive.runs == plain.runs


def test_plain_bisection_goes_wrong_with_flakes_and_ours_does_not():
    bisects = 100
    histories = [History(1001, 1 + (7919 * s) % 1000, flake_rate=0.1) for s in range(bisects)]
    plain = [simulate(KArySearch(), h, seed=s) for s, h in enumerate(histories)]
    ours = [simulate(NoisyBisect(), h, seed=s, confirm=ConfirmPolicy()) for s, h in enumerate(histories)]
    assert sum(r.correct for r in plain) < 0.6 * bisects
    assert sum(r.correct for r in ours) >= 0.95 * bisects


def test_confirmation_on_a_reliable_test_costs_six_runs():
    without = simulate(NoisyBisect(), History(1001, 400))
    confirmed = simulate(NoisyBisect(), History(1001, 400), confirm=ConfirmPolicy())
    assert confirmed.confirm_runs == 6
    assert confirmed.runs == without.runs + 6
    assert confirmed.status is SimStatus.FOUND
    assert confirmed.confidence == pytest.approx(1 - 1 / 70)


def test_skips_give_an_ambiguous_range():
    result = simulate(NoisyBisect(), History(100, 50, skips=frozenset({48, 49})), confirm=ConfirmPolicy())
    assert result.status is SimStatus.AMBIGUOUS
    assert (result.last_good, result.first_bad) == (47, 50)
    assert result.correct


def test_a_budget_stops_an_endless_search():
    result = simulate(NoisyBisect(), History(1001, 400, flake_rate=0.45), max_runs=50, confirm=ConfirmPolicy())
    assert result.status in (SimStatus.BUDGET, SimStatus.NOT_REPRODUCIBLE, SimStatus.FOUND)
    assert result.runs <= 50 + 2 * 20


def test_history_validates_itself():
    with pytest.raises(ValueError, match="culprit"):
        History(10, 0)
    with pytest.raises(ValueError, match="flake_rate"):
        History(10, 3, flake_rate=0.5)
    with pytest.raises(ValueError, match="slots"):
        simulate(KArySearch(), History(10, 3), slots=0)
