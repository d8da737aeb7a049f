"""The product's simulator: simulated histories through the coordinator's own decision core."""

from __future__ import annotations

import math

import pytest
from simulate import History, SimStatus
from simulate_core import ProductOptions, WorkerFault, simulate_core


@pytest.mark.parametrize("size", [3, 17, 1001])
def test_a_clean_bisect_at_one_worker_runs_as_often_as_git_bisect(size: int):
    """Lazy endpoints: no run the answer does not rest on; about log2(n) runs."""
    for culprit in sorted({1, size // 3, size - 1}):
        result = simulate_core(History(size, culprit))
        assert (result.status, result.correct) == (SimStatus.FOUND, True)
        lazy_ends = int(culprit == 1) + int(culprit == size - 1)
        assert result.runs <= math.ceil(math.log2(size - 1)) + lazy_ends


def test_verifying_first_runs_both_endpoints():
    lazy = simulate_core(History(101, 50))
    first = simulate_core(History(101, 50), ProductOptions(verify_endpoints="first"))
    assert first.runs == lazy.runs + 2


def test_one_sided_flakes_on_a_late_culprit_are_survived():
    """The issue's case: a good commit fails 25% of its runs at random, 120 commits, the culprit at 113."""
    history = History(121, 113, flake_rate=0.25, one_sided=True)
    results = [simulate_core(history, ProductOptions(strategy="noisy"), seed=seed) for seed in range(20)]
    assert sum(r.correct for r in results) >= 19
    assert all(r.status is not SimStatus.ENDPOINTS_MISMATCH for r in results)


def test_parallel_workers_take_fewer_rounds():
    history = History(1001, 637)
    one, eight = simulate_core(history), simulate_core(history, slots=8)
    assert eight.correct
    assert eight.rounds * 2.5 <= one.rounds


def test_a_round_is_taken_in_whole_so_eight_workers_split_by_nine():
    """The runs of a round end together and are decided on together (as the loop gathers a round): each round
    splits the suspects into 9 parts, so n = 1000 takes at most 4 rounds (9^3 < 1000 < 9^4) and often 3."""
    rounds = [simulate_core(History(1000, culprit), slots=8).rounds for culprit in range(1, 1000, 37)]
    assert max(rounds) == 4
    assert rounds.count(3) >= len(rounds) // 3


@pytest.mark.parametrize(
    ("history", "options", "seed"),
    [
        (History(29, 26, noise_sigma=0.5), ProductOptions(strategy="noisy", max_repeat=7, noise_band=0.25), 171),
        (History(19, 14, noise_sigma=1.0), ProductOptions(repeat=3), 156),
    ],
)
def test_a_noisy_metric_search_settles_as_it_tests_commits_again(history: History, options: ProductOptions, seed: int):
    """A metric's noise makes the search noisy; each of its re-tests of a commit adds to the evidence there, so the
    posterior settles (these seeds probed the same commits forever while a commit's samples counted once)."""
    result = simulate_core(history, options, seed=seed, max_runs=1000)
    assert (result.status, result.correct) == (SimStatus.FOUND, True)


def test_a_noisy_metric_endpoint_is_not_judged_by_one_sample():
    """An endpoint's samples are its runs: one sample on the wrong side asks for more there, as a flaky run does
    (these seeds ended `endpoints_mismatch` after one to three runs)."""
    options = ProductOptions(strategy="noisy", max_repeat=7, noise_band=0.25)
    for seed in (8, 17, 19):
        result = simulate_core(History(21, 1 + seed % 19, noise_sigma=0.5), options, seed=seed, max_runs=1000)
        assert (result.status, result.correct) == (SimStatus.FOUND, True), seed


def test_a_flaky_test_does_not_get_a_healthy_worker_quarantined():
    """A test flaking in 20% of runs at two healthy workers: flakes make them disagree, which puts both under check,
    and flakes alone must not make either look broken (at these seeds a rule of "half of 6 endpoint runs wrong"
    quarantined one or both)."""
    for seed in (20, 21, 26, 30):
        history = History(41, 1 + seed % 39, flake_rate=0.2)
        result = simulate_core(history, ProductOptions(strategy="noisy"), slots=2, seed=seed)
        assert result.reference_runs > 0, seed  # the workers were checked
        assert (result.status, result.correct, result.quarantined) == (SimStatus.FOUND, True, ()), seed


@pytest.mark.parametrize(
    ("fault", "seeds"),
    [(fault, (0, 1, 2)) for fault in WorkerFault if fault is not WorkerFault.MOSTLY_FAILS]
    + [(WorkerFault.MOSTLY_FAILS, (1, 3, 5))],
)
def test_a_broken_worker_beside_a_flaky_test_is_quarantined(fault: WorkerFault, seeds: tuple[int, ...]):
    """Every kind of broken worker, at 2 workers and a test flaking in 10% of runs, is set aside once a disagreement
    puts it under check, and the culprit is found (a worker failing 3 runs in 4 is right at the good endpoint now
    and then: at these seeds a rule of "half of 6 endpoint runs wrong" let it through and named a wrong culprit)."""
    for seed in seeds:
        history = History(41, 17, flake_rate=0.1)
        result = simulate_core(history, ProductOptions(strategy="noisy"), slots=2, seed=seed, faults={"sim-1": fault})
        assert (result.status, result.correct, result.quarantined) == (SimStatus.FOUND, True, ("sim-1",)), seed
