"""Search strategies: pure functions of (candidates, verdicts, observations, in-flight probes)."""

from bisector.core.strategies.base import (
    Outcome,
    OutcomeKind,
    SearchState,
    Strategy,
    estimated_steps_left,
    settled_outcome,
)
from bisector.core.strategies.kary import KArySearch
from bisector.core.strategies.noisy import NoisyBisect, is_consistent
from bisector.core.strategies.posterior import CulpritPosterior, CulpritRange, FlakePrior
from bisector.core.strategies.select import STRATEGY_NAMES, choose_strategy

__all__ = [
    "STRATEGY_NAMES",
    "CulpritPosterior",
    "CulpritRange",
    "FlakePrior",
    "KArySearch",
    "NoisyBisect",
    "Outcome",
    "OutcomeKind",
    "SearchState",
    "Strategy",
    "choose_strategy",
    "estimated_steps_left",
    "is_consistent",
    "settled_outcome",
]
