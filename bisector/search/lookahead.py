"""Which commits the search will likely probe next: for each probe in flight, the strategy's next probe were it
to come back bad, and were it to come back good. Pure: what the loop builds ahead (workers/build_ahead.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bisector.strategies.base import SearchState
from vocab.domain import StepPurpose, Verdict

if TYPE_CHECKING:
    from bisector.search.decide import SearchCore


def likely_probes(core: SearchCore, limit: int) -> list[int]:
    """Ledger positions, likeliest first (probes sent first come back first), at most limit: none already
    tested or in flight. An endpoint check's outcome is not guessed (it only confirms what is assumed)."""
    if limit <= 0:
        return []
    state, strategy = core.state(), core.chosen_strategy()
    if strategy.outcome(state) is not None:
        return []
    out: list[int] = []
    for _, flight in sorted(core.ledger.in_flight.items()):
        index = core.index_of.get(flight.position)
        if flight.purpose is not StepPurpose.SEARCH or index is None or index in (0, core.last):
            continue
        for verdict in (Verdict.BAD, Verdict.GOOD):
            known = {**state.verdicts, index: verdict}
            guess = SearchState(state.size, known, state.in_flight - {index}, state.observations)
            if strategy.outcome(guess) is not None:
                continue
            for probe in strategy.next_probes(guess, 1):
                position = core.order[probe]
                if probe not in state.verdicts and probe not in state.in_flight and position not in out:
                    out.append(position)
    return out[:limit]


def open_positions(core: SearchCore) -> set[int]:
    """Ledger positions the search may still run: those between the last good and the first bad commit, and the
    ones in flight (a build of one of these is still of use)."""
    lo, hi = core.state().boundary()
    return set(core.order[lo : hi + 1]) | {f.position for f in core.ledger.in_flight.values()}
