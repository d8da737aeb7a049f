"""Which commits the search will likely probe next: for each probe in flight, the strategy's next probe were it
to come back bad, and were it to come back good, then theirs. Pure: what the loop builds ahead
(workers/build_ahead.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from bisector.strategies.base import SearchState
from vocab.domain import StepPurpose, Verdict

if TYPE_CHECKING:
    from bisector.search.decide import SearchCore

MAX_DEPTH = 6  # outcomes guessed ahead at most: 2**6 successors of one probe, more than any limit asks


def likely_probes(core: SearchCore, limit: int) -> list[int]:
    """Ledger positions, likeliest first, at most limit, none already tested or in flight: for each probe in flight
    (sent first, back first) its successor were it bad and were it good; then, where the limit leaves room, theirs
    in turn (a build longer than a test needs more than one step's head start). An endpoint check in flight is
    guessed to confirm its end (good at the good end, bad at the bad end)."""
    if limit <= 0:
        return []
    state, strategy = core.state(), core.chosen_strategy()
    if strategy.outcome(state) is not None:
        return []
    frontier = [
        (state, index)
        for _, flight in sorted(core.ledger.in_flight.items())
        if flight.purpose is StepPurpose.SEARCH and (index := core.index_of.get(flight.position)) is not None
    ]
    out: list[int] = []
    for _ in range(MAX_DEPTH):
        following: list[tuple[SearchState, int]] = []
        for known, index in frontier:
            ends = {0: (Verdict.GOOD,), core.last: (Verdict.BAD,)}
            for verdict in ends.get(index, (Verdict.BAD, Verdict.GOOD)):
                guess = SearchState(
                    known.size, {**known.verdicts, index: verdict}, known.in_flight - {index}, known.observations
                )
                if strategy.outcome(guess) is not None:
                    continue
                for probe in strategy.next_probes(guess, 1):
                    position = core.order[probe]
                    if probe not in state.verdicts and probe not in state.in_flight and position not in out:
                        out.append(position)
                    following.append((replace(guess, in_flight=guess.in_flight | {probe}), probe))
        if len(out) >= limit or not following:
            break
        frontier = following
    return out[:limit]


def open_positions(core: SearchCore) -> set[int]:
    """Ledger positions the search may still run: those between the last good and the first bad commit, and the
    ones in flight (a build of one of these is still of use)."""
    lo, hi = core.state().boundary()
    return set(core.order[lo : hi + 1]) | {f.position for f in core.ledger.in_flight.values()}
