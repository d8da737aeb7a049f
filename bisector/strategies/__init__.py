"""Search strategies: pure functions of (candidates, verdicts, in-flight probes)."""

from bisector.strategies.base import (
    Outcome,
    OutcomeKind,
    SearchState,
    Strategy,
    estimated_steps_left,
    settled_outcome,
)
from bisector.strategies.kary import KArySearch

__all__ = [
    "KArySearch",
    "Outcome",
    "OutcomeKind",
    "SearchState",
    "Strategy",
    "estimated_steps_left",
    "settled_outcome",
]
