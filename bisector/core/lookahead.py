"""Which commits the search will likely probe next: the strategy's next probes for each way the probes in flight
can come back, then theirs. Pure: what the loop builds ahead (workers/build_ahead.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from bisector.core.strategies.base import SearchState
from bisector.vocab.domain import StepPurpose, Verdict

if TYPE_CHECKING:
    from bisector.core.decide import SearchCore

MAX_DEPTH = 6  # rounds guessed ahead at most: at W=1, 2**6 successors of one probe, more than any limit asks


def likely_probes(core: SearchCore, limit: int) -> list[int]:
    """Ledger positions, likeliest first, at most limit, none already tested or in flight: the probes the search
    sends once the probes in flight come back, for each way they can (a round of k probes ends in one of k + 1
    consistent ways: the first j good, the rest bad), the ways that leave the most suspects first (every culprit
    equally likely); then, where the limit leaves room, the probes after those (a build longer than a test needs
    more than one step's head start). An endpoint check in flight is guessed to confirm its end."""
    state, strategy = core.state(), core.chosen_strategy()
    if limit <= 0 or strategy.outcome(state) is not None:
        return []
    lo, hi = state.boundary()
    flights = {  # a probe outside the boundary (its result cannot matter: it is being cancelled) is not guessed
        index
        for flight in core.ledger.in_flight.values()
        if flight.purpose is StepPurpose.SEARCH
        and (index := core.index_of.get(flight.position)) is not None
        and (lo < index < hi or index in (0, core.last))
    }
    frontier = [(state, tuple(sorted(flights)))] if flights else []
    out: list[int] = []
    seen: set[int] = set()
    for _ in range(MAX_DEPTH):
        following: list[tuple[SearchState, tuple[int, ...]]] = []
        for known, running in frontier:
            for guess in round_outcomes(known, running, core.last):
                if strategy.outcome(guess) is not None:
                    continue
                probes = tuple(strategy.next_probes(guess, len(running)))
                for probe in probes:
                    if lo < probe < hi and probe not in state.in_flight and probe not in seen:
                        seen.add(probe)
                        out.append(core.order[probe])
                if probes:
                    following.append((replace(guess, in_flight=guess.in_flight | set(probes)), probes))
        if len(out) >= limit or not following:
            break
        frontier = following
    return out[:limit]


def round_outcomes(known: SearchState, running: tuple[int, ...], last: int) -> list[SearchState]:
    """The states once the probes at these indexes (sorted) come back, for each consistent way, likeliest first:
    an endpoint confirms its end; of the others, the first j good and the rest bad, j = 0 .. k."""
    ends = {i: Verdict.GOOD if i == 0 else Verdict.BAD for i in running if i in (0, last)}
    inner = [i for i in running if i not in ends]
    left = known.in_flight - set(running)
    guesses = []
    for good in range(len(inner) + 1):
        verdicts = {**known.verdicts, **ends}
        verdicts.update({i: Verdict.GOOD if n < good else Verdict.BAD for n, i in enumerate(inner)})
        guesses.append(SearchState(known.size, verdicts, left, known.observations))
    return sorted(guesses, key=lambda guess: -guess.suspects())  # stable: bad first among equals


def still_open(core: SearchCore) -> Callable[[str], bool]:
    """Whether the search may still run a commit (by its sha): one strictly between the last good and the first bad
    commit, or one in flight (a build for it is still of use)."""
    lo, hi = core.state().boundary()
    flying = {f.position for f in core.ledger.in_flight.values()}

    def may_run(sha: str) -> bool:
        position = core.ledger.position.get(sha)
        if position is None:
            return False
        index = core.index_of.get(position)
        return position in flying or (index is not None and lo < index < hi)

    return may_run
