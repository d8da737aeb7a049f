"""Noisy bisection: a posterior over the culprit, a flake rate learned during the run, repeated probes.

Two regimes, one model (the flake rate ε has a spike-and-slab prior: "reliable, ε = 0" or "flaky,
ε ~ Beta(a, b)"; the strategy acts on the reliable component until the data rule it out):

* While the observations are consistent with some culprit (every good one before every bad one, no commit
  seen both ways), nothing says the test is flaky: ε = 0, every observation is certain, the posterior is
  uniform over the open range: the prior KArySearch sizes its parts for. The strategy then *is* KArySearch
  (it delegates), so on a reliable test it costs exactly what the k-ary search costs.
* The first contradiction (a commit seen good and bad, or good after bad) proves ε > 0. From then on the
  posterior of `CulpritPosterior` is used: ε ~ Beta(a, b) integrated out, so its estimate is learned from
  every observation, endpoints included. Probes go to the posterior quantiles i/(W+1) for the W free
  slots, already-tested commits included (re-testing is how a flake is told from a verdict), and the
  answer is given once one commit (or one skip range) holds `confidence` of the mass.

A flake that never contradicts anything (a wrong turn in the consistent regime) is invisible to any
search; the confirmation step (bisector/core/confirm.py) re-tests the boundary to expose it, and its
observations flow back into the same state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bisector.core.strategies.base import Outcome, OutcomeKind, SearchState, settled_outcome
from bisector.core.strategies.kary import KArySearch
from bisector.core.strategies.posterior import CulpritPosterior, FlakePrior
from bisector.vocab.domain import Verdict

DEFAULT_CONFIDENCE = 0.99

_PosteriorKey = tuple[int, tuple[tuple[int, tuple[int, int]], ...], frozenset[int]]


class NoisyBisect:
    name = "noisy"

    def __init__(self, confidence: float = DEFAULT_CONFIDENCE, flake_prior: FlakePrior | None = None) -> None:
        if not 0.5 < confidence < 1.0:
            raise ValueError(f"confidence must lie in (0.5, 1) (got {confidence})")
        self.confidence = confidence
        self.flake_prior = flake_prior or FlakePrior()
        self._kary = KArySearch()
        # A memo, not state: the coordinator asks outcome() and next_probes() of the same observations in turn.
        self._last: tuple[_PosteriorKey, CulpritPosterior] | None = None

    def next_probes(self, state: SearchState, free_slots: int) -> list[int]:
        if free_slots <= 0:
            return []
        observed = state.observed()
        if is_consistent(state.size, observed):
            return self._kary.next_probes(_trusted_state(state, observed), free_slots)
        return _quantile_probes(self.posterior(state), state, observed, free_slots)

    def outcome(self, state: SearchState) -> Outcome | None:
        observed = state.observed()
        if is_consistent(state.size, observed):
            settled = settled_outcome(_trusted_state(state, observed))
            if settled is None:
                return None
            return Outcome(settled.kind, settled.last_good, settled.first_bad, confidence=1.0)
        best = self.posterior(state).best_range()
        if best.mass < self.confidence:
            return None
        kind = OutcomeKind.FOUND if best.first_bad == best.last_good + 1 else OutcomeKind.AMBIGUOUS
        return Outcome(kind, best.last_good, best.first_bad, confidence=best.mass)

    def posterior(self, state: SearchState) -> CulpritPosterior:
        observed = state.observed()
        skipped = _skipped(state, observed)
        key = (state.size, tuple(sorted(observed.items())), skipped)
        if self._last is None or self._last[0] != key:
            self._last = (key, CulpritPosterior(state.size, observed, skipped, self.flake_prior))
        return self._last[1]

    def flake_rate(self, state: SearchState) -> float:
        """The learned flake rate: 0 while no contradiction has been seen, else the posterior mean."""
        if is_consistent(state.size, state.observed()):
            return 0.0
        return self.posterior(state).flake_rate()


def is_consistent(size: int, observed: Mapping[int, tuple[int, int]]) -> bool:
    """Whether some culprit in 1..size-1 explains every observation (goods before bads, endpoints as known)."""
    last_good = max((p for p, (good, _) in observed.items() if good), default=0)
    first_bad = min((p for p, (_, bad) in observed.items() if bad), default=size - 1)
    return last_good < first_bad


def _skipped(state: SearchState, observed: Mapping[int, tuple[int, int]]) -> frozenset[int]:
    """Untestable positions: skipped, and never observed good or bad (a later skip does not erase results)."""
    return frozenset(p for p, v in state.verdicts.items() if v is Verdict.SKIP and p not in observed)


def _trusted_state(state: SearchState, observed: Mapping[int, tuple[int, int]]) -> SearchState:
    """The verdicts that consistent observations imply, for the k-ary search."""
    verdicts: dict[int, Verdict] = dict.fromkeys(_skipped(state, observed), Verdict.SKIP)
    verdicts.update({p: Verdict.GOOD if good else Verdict.BAD for p, (good, _) in observed.items()})
    return SearchState(state.size, verdicts, state.in_flight)


def _quantile_probes(
    posterior: CulpritPosterior, state: SearchState, observed: Mapping[int, tuple[int, int]], free_slots: int
) -> list[int]:
    """One probe per quantile i/(W+1): of the two testable commits around it, the one whose CDF is nearer.

    Testing x asks "is the culprit at or before x?", worth most when P(culprit <= x) is nearest the quantile.
    Taking the nearer of the two neighbours (not always the upper one) keeps a concentrated posterior from
    re-testing only its mode: the commit before the mode gets tested too, which is what confirms it.
    """
    skipped = _skipped(state, observed)
    taken = set(state.in_flight)
    probes: list[int] = []

    def free(p: int) -> bool:
        return 1 <= p <= state.size - 2 and p not in skipped and p not in taken

    def runs(p: int) -> int:
        return sum(observed.get(p, (0, 0)))

    for i in range(1, free_slots + 1):
        quantile = i / (free_slots + 1)
        pivot = posterior.position_at(quantile)
        left = _nearest(pivot - 1, -1, free, state.size)
        right = _nearest(pivot, +1, free, state.size)
        options = [p for p in (left, right) if p is not None]
        if not options:
            break
        choice = min(options, key=lambda p: (round(abs(posterior.cdf(p) - quantile), 12), runs(p), p))
        probes.append(choice)
        taken.add(choice)
    return probes


def _nearest(start: int, step: int, free: Callable[[int], bool], size: int) -> int | None:
    p = start
    while 1 <= p <= size - 2:
        if free(p):
            return p
        p += step
    return None
