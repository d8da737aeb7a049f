"""What every search strategy sees and says. Strategies are pure: no I/O, no clock, no randomness.

Positions index the candidate list: 0 is the good endpoint, n-1 the bad endpoint. The coordinator
maps verdicts onto positions (an error that exhausted its retries counts as SKIP here). When a commit is
tested more than once (repeats, flaky tests), `observations` holds how many runs (or decided sample sets)
said good and bad there; strategies that model noise read it, KArySearch reads only `verdicts`.

    [G, ?, ?, B, ?, B]  ->  boundary (0, 3): the first bad commit is 1, 2 or 3
    [G, G, S, B, ?, B]  ->  nothing left to test: ambiguous, first bad is 2 or 3
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from bisector.vocab.domain import Verdict


@dataclass(frozen=True)
class SearchState:
    size: int  # number of positions, endpoints included
    verdicts: Mapping[int, Verdict]  # decided positions: GOOD, BAD or SKIP
    in_flight: frozenset[int] = field(default_factory=frozenset)
    # (good, bad) counts per position; positions absent here count their GOOD/BAD verdict as one observation
    observations: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    def observed(self) -> dict[int, tuple[int, int]]:
        """(good, bad) counts of every position with at least one GOOD or BAD observation."""
        counts = {p: (g, b) for p, (g, b) in self.observations.items() if g + b > 0}
        for p, v in self.verdicts.items():
            if p not in counts and v.decides:
                counts[p] = (1, 0) if v is Verdict.GOOD else (0, 1)
        return counts

    def boundary(self) -> tuple[int, int]:
        """(last good, first bad) around the culprit: the first bad commit lies in (lo, hi]."""
        hi = min((p for p, v in self.verdicts.items() if v is Verdict.BAD), default=self.size - 1)
        lo = max((p for p, v in self.verdicts.items() if v is Verdict.GOOD and p < hi), default=0)
        return lo, hi

    def untested(self) -> list[int]:
        """Positions strictly inside the boundary with no verdict and no step in flight."""
        lo, hi = self.boundary()
        return [p for p in range(lo + 1, hi) if p not in self.verdicts and p not in self.in_flight]

    def suspects(self) -> int:
        """How many commits could still be the first bad one (skipped ones included)."""
        lo, hi = self.boundary()
        return hi - lo

    def contradictions(self, first_bad: int) -> list[int]:
        """Good verdicts after the answer's first bad commit: the metric is not monotonic (noise, or two changes)."""
        return sorted(p for p, v in self.verdicts.items() if v is Verdict.GOOD and p > first_bad)


class OutcomeKind(StrEnum):
    FOUND = "found"  # one first bad commit
    AMBIGUOUS = "ambiguous"  # skipped commits beside the boundary: (last_good, first_bad] all candidates


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    last_good: int
    first_bad: int  # with AMBIGUOUS, the first commit known bad; the culprit is in (last_good, first_bad]
    confidence: float | None = None  # posterior mass of the answer (NoisyBisect); None: no noise model


class Strategy(Protocol):
    name: str

    def next_probes(self, state: SearchState, free_slots: int) -> list[int]:
        """Positions to test next, at most free_slots of them, distinct and none in flight.

        KArySearch never returns a decided position; a strategy that models noise (NoisyBisect) may, on
        purpose: testing a commit again is how it tells a flake from a verdict.
        """
        ...

    def outcome(self, state: SearchState) -> Outcome | None:
        """The answer once the state determines it, else None."""
        ...


def settled_outcome(state: SearchState) -> Outcome | None:
    """The outcome of a state in which every commit inside the boundary has been decided."""
    lo, hi = state.boundary()
    inside = range(lo + 1, hi)
    if any(p not in state.verdicts for p in inside):
        return None
    kind = OutcomeKind.FOUND if hi == lo + 1 else OutcomeKind.AMBIGUOUS
    return Outcome(kind, lo, hi)


def estimated_steps_left(state: SearchState, slots: int) -> int:
    """Steps still to run if every probe halves (one slot) or splits W+1 ways (W slots) the suspects."""
    suspects = len(state.untested()) + 1
    if suspects <= 1:
        return 0
    rounds = math.ceil(math.log(suspects, slots + 1))
    return min(len(state.untested()), rounds * slots)
