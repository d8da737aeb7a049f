"""The decision layer: threshold and comparative decisions, adaptive repeats, endpoints, confirmation."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import fisher_exact

from bisector.core.confirm import ConfirmStatus, confirm_pass_fail, fisher_p
from bisector.core.stats import (
    Call,
    Decision,
    EndpointsCheck,
    check_endpoints,
    confirm_samples,
    decide_comparative,
    decide_threshold,
    distinguishable_p,
    more_samples,
)
from bisector.vocab.domain import Verdict
from bisector.vocab.metric import Direction, Expectation

AT_LEAST_4 = Expectation.parse(">= 4.0")
BELOW_51_MS = Expectation.parse("< 51.0")


def gauss(mean: float, sigma: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(mean, sigma) for _ in range(n)]


# --- threshold ------------------------------------------------------------------------------------------


def test_without_a_band_one_sample_decides_like_a_single_run():
    assert decide_threshold([4.2], AT_LEAST_4).call is Call.GOOD
    assert decide_threshold([3.9], AT_LEAST_4).call is Call.BAD
    assert decide_threshold([4.0], AT_LEAST_4).call is Call.GOOD  # >= includes the threshold


def test_lower_is_better_threshold():
    assert decide_threshold([51.4], BELOW_51_MS).call is Call.BAD
    assert decide_threshold([50.2], BELOW_51_MS).call is Call.GOOD


def test_inside_the_band_is_uncertain_until_the_samples_agree():
    near = decide_threshold([51.4], BELOW_51_MS, band=0.5)
    assert near.call is Call.UNCERTAIN
    assert near.lean is Call.BAD
    assert near.final_verdict() is Verdict.BAD  # what a spent repeat budget records
    far = decide_threshold([52.0], BELOW_51_MS, band=0.5)
    assert far.call is Call.BAD
    consistent = decide_threshold([51.4, 51.5, 51.3, 51.45, 51.35], BELOW_51_MS, band=0.5)
    assert consistent.call is Call.BAD
    assert consistent.p_value is not None
    assert consistent.p_value < 0.01
    scattered = decide_threshold([51.4, 50.7, 51.2], BELOW_51_MS, band=0.5)
    assert scattered.call is Call.UNCERTAIN


def test_identical_samples_need_no_test_and_raise_no_warning():
    inside = decide_threshold([4.3, 4.3, 4.3], AT_LEAST_4, band=0.5)
    assert (inside.call, inside.p_value) == (Call.GOOD, 0.0)  # no spread: the same result every time
    on_it = decide_threshold([4.0, 4.0, 4.0], Expectation.parse("> 4.0"), band=0.1)
    assert (on_it.call, on_it.lean, on_it.p_value) == (Call.UNCERTAIN, Call.BAD, 1.0)


def test_no_samples_is_uncertain():
    decision = decide_threshold([], AT_LEAST_4)
    assert decision.call is Call.UNCERTAIN
    assert decision.final_verdict() is None


def test_find_fix_swaps_the_roles():
    # Looking for the fix: the old commits violate the expectation, so violating it means "like the old end".
    assert decide_threshold([3.5], AT_LEAST_4, find_fix=True).call is Call.GOOD
    assert decide_threshold([4.5], AT_LEAST_4, find_fix=True).call is Call.BAD
    assert "find-fix" in decide_threshold([4.5], AT_LEAST_4, find_fix=True).reason


# --- comparative ----------------------------------------------------------------------------------------


def test_comparative_clear_sets_are_decided():
    good, bad = gauss(100.0, 1.0, 10, 1), gauss(90.0, 1.0, 10, 2)
    assert decide_comparative(gauss(100.0, 1.0, 10, 3), good, bad).call is Call.GOOD
    assert decide_comparative(gauss(90.0, 1.0, 10, 4), good, bad).call is Call.BAD


def test_comparative_overlapping_sets_are_uncertain():
    good, bad = gauss(100.0, 5.0, 10, 1), gauss(98.0, 5.0, 10, 2)
    decision = decide_comparative(gauss(99.0, 5.0, 10, 3), good, bad)
    assert decision.call is Call.UNCERTAIN
    assert decision.lean in (Call.GOOD, Call.BAD)


def test_comparative_needs_spread_endpoints():
    assert decide_comparative([1.0], [2.0, 2.0], [2.0, 2.0]).call is Call.UNCERTAIN
    assert decide_comparative([], [1.0], [2.0]).call is Call.UNCERTAIN


def test_comparative_min_effect_leaves_a_partial_shift_undecided():
    good, bad = gauss(100.0, 0.5, 30, 1), gauss(90.0, 0.5, 30, 2)
    halfway = gauss(94.0, 0.5, 30, 3)  # 60% of the way to bad, far from both sets
    assert decide_comparative(halfway, good, bad).call is Call.BAD
    assert decide_comparative(halfway, good, bad, min_effect=0.8).call is Call.UNCERTAIN


def test_one_sample_cannot_be_told_apart():
    assert distinguishable_p([1.0], [2.0]) == 1.0
    assert distinguishable_p([3.0, 3.0], [3.0, 3.0]) == 1.0
    assert distinguishable_p([0.0] * 10, [1.0] * 10) < 1e-4


@given(
    samples=st.lists(st.floats(min_value=-1e3, max_value=1e3), max_size=12),
    good=st.lists(st.floats(min_value=-1e3, max_value=1e3), max_size=12),
    bad=st.lists(st.floats(min_value=-1e3, max_value=1e3), max_size=12),
    band=st.floats(min_value=0, max_value=10),
)
@settings(max_examples=300, deadline=None)
def test_tiny_or_tied_samples_never_warn(samples, good, bad, band):
    # pytest turns warnings into errors: this fails if scipy warns on degenerate input.
    decide_threshold(samples, AT_LEAST_4, band=band)
    decision = decide_comparative(samples, good, bad)
    assert decision.call in Call
    assert Decision.from_json(decision.to_json()) == decision


# --- endpoints and direction ----------------------------------------------------------------------------


def test_endpoints_must_differ_the_way_the_direction_says():
    fast, slow = gauss(100.0, 1.0, 10, 1), gauss(80.0, 1.0, 10, 2)  # throughput: higher is better
    assert check_endpoints(fast, slow, direction=Direction.HIGHER)[0] is EndpointsCheck.DISTINCT
    assert check_endpoints(slow, fast, direction=Direction.HIGHER)[0] is EndpointsCheck.WRONG_WAY
    assert check_endpoints(slow, fast, direction=Direction.HIGHER, find_fix=True)[0] is EndpointsCheck.DISTINCT
    assert check_endpoints(fast, slow, direction=Direction.LOWER)[0] is EndpointsCheck.WRONG_WAY
    assert check_endpoints(fast, fast[::-1], direction=Direction.HIGHER)[0] is EndpointsCheck.NOT_DISTINCT


# --- adaptive repeats -----------------------------------------------------------------------------------


def test_repeats_escalate_only_while_uncertain():
    counts = [1]
    samples = [51.1]
    rng = random.Random(0)
    while (wanted := more_samples(decide_threshold(samples, BELOW_51_MS, band=0.5), max_repeat=15)) > 0:
        samples += [51.0 + rng.uniform(-0.6, 0.6) for _ in range(wanted)]
        counts.append(len(samples))
    assert counts == [1, 3, 7, 15]
    assert more_samples(decide_threshold([53.0], BELOW_51_MS, band=0.5), max_repeat=15) == 0


def test_repeats_stop_at_max_repeat():
    uncertain = decide_threshold([51.1] * 3 + [50.9] * 3, BELOW_51_MS, band=0.5)
    assert uncertain.call is Call.UNCERTAIN
    assert more_samples(uncertain, max_repeat=8) == 2
    assert more_samples(uncertain, max_repeat=6) == 0


# --- confirmation ---------------------------------------------------------------------------------------


@given(
    parent=st.tuples(st.integers(0, 15), st.integers(0, 15)),
    first_bad=st.tuples(st.integers(0, 15), st.integers(0, 15)),
)
def test_fisher_p_matches_scipy(parent, first_bad):
    if sum(parent) + sum(first_bad) == 0:
        return
    table = [[parent[1], parent[0]], [first_bad[1], first_bad[0]]]  # rows: parent, first_bad; cols: bad, good
    expected = fisher_exact(table, alternative="less").pvalue
    assert fisher_p(parent, first_bad) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_a_clean_boundary_is_confirmed_after_three_more_pairs():
    first = confirm_pass_fail((1, 0), (0, 1))
    assert first.status is ConfirmStatus.NEED_MORE
    assert first.pairs_wanted == 3
    done = confirm_pass_fail((4, 0), (0, 4))
    assert done.status is ConfirmStatus.CONFIRMED
    assert done.confidence > 0.98


def test_a_flaky_non_culprit_is_not_reproducible():
    """Parent and 'first bad' are the same commit state, failing 30% of the time: never a confirmed culprit."""
    outcomes = []
    for seed in range(100):
        rng = random.Random(seed)
        parent, child = (1, 0), (0, 1)  # the search happened to see a pass then a flaky failure
        while (verdict := confirm_pass_fail(parent, child)).status is ConfirmStatus.NEED_MORE:
            for _ in range(verdict.pairs_wanted):
                parent = (parent[0], parent[1] + 1) if rng.random() < 0.3 else (parent[0] + 1, parent[1])
                child = (child[0], child[1] + 1) if rng.random() < 0.3 else (child[0] + 1, child[1])
        outcomes.append(verdict.status)
    assert outcomes.count(ConfirmStatus.NOT_REPRODUCIBLE) >= 90


def test_metric_confirmation():
    parent, regressed = gauss(50.0, 0.3, 8, 1), gauss(51.4, 0.3, 8, 2)
    assert confirm_samples(parent, regressed, direction=Direction.LOWER).status is ConfirmStatus.CONFIRMED
    wrong_way = confirm_samples(regressed, parent, direction=Direction.LOWER)
    assert wrong_way.status is ConfirmStatus.NOT_REPRODUCIBLE
    fixed = confirm_samples(regressed, parent, direction=Direction.LOWER, find_fix=True)
    assert fixed.status is ConfirmStatus.CONFIRMED
    same = confirm_samples(gauss(50.0, 1.0, 20, 3), gauss(50.0, 1.0, 20, 4), max_pairs=20)
    assert same.status is ConfirmStatus.NOT_REPRODUCIBLE
    early = confirm_samples([50.0], [51.4])
    assert early.status is ConfirmStatus.NEED_MORE
    assert early.pairs_wanted == 1
