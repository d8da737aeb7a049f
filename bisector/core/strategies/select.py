"""Which strategy a bisect uses: the operator's choice, else noisy as soon as noise is expected or seen."""

from __future__ import annotations

from bisector.core.strategies.base import Strategy
from bisector.core.strategies.kary import KArySearch
from bisector.core.strategies.noisy import NoisyBisect
from bisector.vocab.errors import InputError

STRATEGY_NAMES = ("kary", "noisy")


def choose_strategy(name: str | None, repeats: int, flake_seen: bool) -> Strategy:
    """`--strategy NAME` if given; otherwise noisy when repeats > 1 or a flake has been seen, else kary.

    A flake is seen when one commit produced both a good and a bad verdict, or a good one after the first
    bad one. Both strategies are pure functions of the state, so switching mid-run loses nothing.
    """
    if name is None:
        name = "noisy" if repeats > 1 or flake_seen else "kary"
    if name == "kary":
        return KArySearch()
    if name == "noisy":
        return NoisyBisect()
    raise InputError(f"--strategy {name!r} is unknown; choose one of: {', '.join(STRATEGY_NAMES)}")
