"""KArySearch's uneven splits: part sizes for the fewest rounds on average, the worst case kept, plain bisection
at one slot, every culprit found."""

from __future__ import annotations

import itertools
import random
from functools import cache

import pytest
from simulate import History
from simulate_core import simulate_core

from bisector.core.strategies import KArySearch, OutcomeKind, SearchState
from bisector.core.strategies.kary import part_sizes
from bisector.vocab.domain import Verdict


def _parts(lo: int, hi: int, probes: list[int]) -> list[int]:
    """Suspects per part when probes split (lo, hi]."""
    cuts = [lo, *sorted(probes), hi]
    return [b - a for a, b in itertools.pairwise(cuts)]


def _fresh(size: int) -> SearchState:
    return SearchState(size, {0: Verdict.GOOD, size - 1: Verdict.BAD})


def _ceil_log(n: int, base: int) -> int:
    rounds, capacity = 0, 1
    while capacity < n:
        rounds, capacity = rounds + 1, capacity * base
    return rounds


def test_the_worked_example_111_suspects_at_eight_slots():
    """8 parts of 9 settle in one more round, the part of 39 in two: 77 of 111 culprits one round sooner than
    with nine parts of ~12."""
    assert part_sizes(111, 8, 9) == [39, 9, 9, 9, 9, 9, 9, 9, 9]
    assert _parts(0, 111, KArySearch().next_probes(_fresh(112), 8)) == [39, 9, 9, 9, 9, 9, 9, 9, 9]


def test_the_first_round_of_1000_suspects_at_eight_slots():
    assert _parts(0, 1000, KArySearch().next_probes(_fresh(1001), 8)) == [352, *[81] * 8]


def test_fewer_free_slots_than_the_search_holds_split_for_the_later_rounds():
    """One slot free, seven probes in flight: the free one splits the larger segment the in-flight ones leave,
    (0, 500], into 2 parts for later rounds of 9, so one part is what two 9-way rounds settle (81), not half."""
    state = SearchState(1001, {0: Verdict.GOOD, 1000: Verdict.BAD}, frozenset(range(500, 507)))
    assert part_sizes(500, 1, 9) == [419, 81]
    assert KArySearch().next_probes(state, 1) == [419]


@pytest.mark.parametrize("size", [2, 3, 4, 5, 6, 17, 100, 101, 1001])
def test_one_slot_probes_the_midpoint(size: int):
    rng = random.Random(size)
    for _ in range(20):
        lo = rng.randrange(0, size - 1)
        hi = rng.randrange(lo + 1, size)
        verdicts = {lo: Verdict.GOOD, hi: Verdict.BAD}
        midpoint = [lo + round((hi - lo) / 2)] if hi - lo > 1 else []
        assert KArySearch().next_probes(SearchState(size, verdicts), 1) == midpoint
        lazy = {p: v for p, v in verdicts.items() if p not in (0, size - 1)}  # endpoints not run
        assert KArySearch().next_probes(SearchState(size, lazy), 1) == midpoint


def _git_bisect_runs(suspects: int, culprit: int) -> int:
    """Runs of plain bisection at the midpoint, plus a lazy endpoint check when the answer rests on it."""
    lo, hi, runs = 0, suspects, 0
    while hi - lo > 1:
        mid = lo + round((hi - lo) / 2)
        lo, hi = (lo, mid) if mid >= culprit else (mid, hi)
        runs += 1
    return runs + (culprit == 1) + (culprit == suspects)


@pytest.mark.parametrize("suspects", [1, 2, 3, 17, 100, 128])
def test_one_worker_in_the_product_runs_what_plain_bisection_runs(suspects: int):
    for culprit in range(1, suspects + 1):
        result = simulate_core(History(suspects + 1, culprit))
        assert result.correct
        assert result.runs == result.rounds == _git_bisect_runs(suspects, culprit)


def _built(suspects: int, parts: int, later_parts: int) -> tuple[int, int]:
    """(total rounds over all culprits, worst rounds) of the tree part_sizes builds."""
    if suspects == 1:
        return 0, 0
    total, worst = suspects, 0
    for size in part_sizes(suspects, parts - 1, later_parts):
        sub_total, sub_worst = _built(size, later_parts, later_parts)
        total, worst = total + sub_total, max(worst, sub_worst + 1)
    return total, worst


@cache
def _fewest_total_rounds(suspects: int, parts: int, later_parts: int) -> int:
    """By exhaustive search: the least total of rounds over all culprits, a round splitting a range into at
    most `parts` parts, every later round into at most `later_parts`."""

    @cache
    def best_split(rest: int, left: int) -> float:
        if rest == 0:
            return 0
        if left == 0:
            return float("inf")
        return min(
            _fewest_total_rounds(size, later_parts, later_parts) + best_split(rest - size, left - 1)
            for size in range(1, min(rest, suspects - 1) + 1)
        )

    return 0 if suspects == 1 else suspects + int(best_split(suspects, parts))


def test_the_splits_give_the_fewest_rounds_on_average_and_at_worst():
    for later_parts in range(2, 6):
        for parts in range(2, later_parts + 1):
            for suspects in range(1, 41):
                total, worst = _built(suspects, parts, later_parts)
                assert total == _fewest_total_rounds(suspects, parts, later_parts), (suspects, parts, later_parts)
                fewest_worst = 0 if suspects == 1 else 1 + _ceil_log(-(-suspects // parts), later_parts)
                assert worst == fewest_worst, (suspects, parts, later_parts)


# (n suspects, W): around the powers of W+1, where a lazy endpoint check is most likely to need a round of its
# own (a split that does not count the endpoints needs one round more at 73 for W=8, 101 for W=4, 49 and 53 for
# W=3). The bound, ceil(log_{W+1}(n + 2)), counts both unverified endpoints as suspects that may need a slot; an
# even split needs as many rounds or more (every n up to 150, W = 2, 3, 4, 8, 16: docs/benchmarks.md). At W=1 no
# slot is ever spare: one more.
WORST_CASES = [(8, 1), (9, 1), (7, 2), (8, 2), (9, 2), (25, 2), (26, 2), (27, 2), (14, 3), (15, 3), (16, 3)]
WORST_CASES += [(49, 3), (53, 3), (23, 4), (24, 4), (25, 4), (26, 4), (101, 4), (34, 5), (36, 5), (47, 6)]
WORST_CASES += [(49, 6), (73, 8), (76, 8), (15, 16), (17, 16)]


@pytest.mark.parametrize(("suspects", "workers"), WORST_CASES)
def test_the_product_needs_no_more_rounds_than_an_even_split_at_worst(suspects: int, workers: int):
    bound = _ceil_log(suspects, 2) + 1 if workers == 1 else _ceil_log(suspects + 2, workers + 1)
    for culprit in range(1, suspects + 1):
        result = simulate_core(History(suspects + 1, culprit), slots=workers)
        assert result.correct
        assert result.rounds <= bound, (culprit, result.rounds, bound)


def _bisect(size: int, culprit: int, workers: int, seed: int, ends_known: bool) -> tuple[int, int]:
    """The strategy alone to its outcome, steps finishing in a random order. The endpoints are given as verdicts
    or, as lazily in the product, run in slots the probes leave while the open range reaches them. Returns the
    (last good, first bad) it names."""
    rng = random.Random(seed)
    strategy = KArySearch()
    ends = (0, size - 1)
    verdicts = {0: Verdict.GOOD, size - 1: Verdict.BAD} if ends_known else {}
    in_flight: list[int] = []
    while (outcome := strategy.outcome(state := SearchState(size, dict(verdicts), frozenset(in_flight)))) is None:
        probes = strategy.next_probes(state, workers - len(in_flight))
        assert len(set(probes)) == len(probes) <= workers - len(in_flight)
        assert not set(probes) & {*ends, *verdicts, *in_flight}
        in_flight += probes
        reached = [end for end in ends if end in state.boundary() and end not in {*verdicts, *in_flight}]
        in_flight += reached[: workers - len(in_flight)]
        assert in_flight, "no outcome and nothing to run"
        done = in_flight.pop(rng.randrange(len(in_flight)))
        verdicts[done] = Verdict.BAD if done >= culprit else Verdict.GOOD
    assert outcome.kind is OutcomeKind.FOUND
    return outcome.last_good, outcome.first_bad


@pytest.mark.parametrize("ends_known", [True, False])
def test_every_culprit_is_found_for_small_ranges(ends_known: bool):
    for size in range(2, 20):
        for workers in sorted({1, 2, 3, 5, 8, size - 1, size}):
            for culprit in range(1, size):
                for seed in range(2):
                    assert _bisect(size, culprit, workers, seed, ends_known) == (culprit - 1, culprit)


@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_every_culprit_is_found_by_the_product_for_small_ranges(workers: int):
    for suspects in range(1, 21):
        for culprit in range(1, suspects + 1):
            result = simulate_core(History(suspects + 1, culprit), slots=workers)
            assert (result.last_good, result.first_bad) == (culprit - 1, culprit)
