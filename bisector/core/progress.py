"""Where a bisect stands, as the decision core computes it for whoever watches."""

from __future__ import annotations

from dataclasses import dataclass

from bisector.vocab.domain import Commit


@dataclass(frozen=True)
class Progress:
    candidates: int  # commits in the range, endpoints included
    suspects: int  # commits that could still be the first bad one
    running: int
    done: int  # finished steps, every verdict
    estimated_left: int  # steps still expected, by the strategy's estimate
    last_good: Commit
    first_bad: Commit
    building_ahead: tuple[Commit, ...] = ()  # commits whose images are being built ahead of their steps
