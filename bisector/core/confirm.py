"""Confirmation of a found boundary: re-test the first bad commit and the last good one until they clearly differ.

The search names a boundary (last_good, first_bad]. A flake that never contradicted anything during the
search can have put it in the wrong place, and a flaky non-culprit can look like a culprit. So the two
commits are re-run in interleaved pairs (parent, first_bad on the same worker, back to back) and the
counts (the search's own observations there included) are tested:

    Fisher's exact test, one-sided: does first_bad fail more often than the last good commit (`parent`)?

* CONFIRMED when p < alpha; the confidence reported is 1 - p.
* NOT_REPRODUCIBLE when even `max_pairs` pairs could no longer reach p < alpha if every remaining pair
  came out clean (parent good, first_bad bad): flaky, not a culprit. This is reported instead of a guess.
* NEED_MORE otherwise, with the fewest further pairs that could reach significance if they all come out
  clean. Pairs that disagree are observations like any other: the noisy strategy sees them, and the
  boundary may move before the confirmation resumes.

Defaults: alpha = 0.02, max_pairs = 20. On a reliable test the search leaves one observation on each side,
and three more clean pairs make 4 vs 4, p = 1/70 = 0.014: six runs. The test is repeated after every
batch (optional stopping), so a flaky non-culprit is confirmed more often than alpha says: with the
defaults, starting from the search's pass/fail pair, 1.4% / 5.7% / 7.5% of the time for a commit that
fails 10% / 30% / 50% of its runs (2000 simulated confirmations each; alpha = 0.05 would give 7.5% / 14% /
17% for the same six runs on a reliable test, hence 0.02).

This module is pure Python (no scipy): a pass/fail test needs no statistics package. Metric samples are
confirmed by `bisector.core.stats.confirm_samples`, which returns the same `Confirmation`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_ALPHA = 0.02
DEFAULT_MAX_PAIRS = 20


class ConfirmStatus(StrEnum):
    CONFIRMED = "confirmed"  # the first bad commit reproducibly differs from the last good one
    NOT_REPRODUCIBLE = "not_reproducible"  # no reproducible difference within the budget: flaky, not a culprit
    NEED_MORE = "need_more"  # run `pairs_wanted` more interleaved pairs, then ask again

    def is_terminal(self) -> bool:
        return self is not ConfirmStatus.NEED_MORE


@dataclass(frozen=True)
class Confirmation:
    status: ConfirmStatus
    p_value: float
    pairs_done: int  # min(runs at parent, runs at first_bad)
    pairs_wanted: int  # more interleaved (parent, first_bad) pairs to run; 0 unless NEED_MORE
    reason: str

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status.value,
            "p_value": self.p_value,
            "confidence": self.confidence,
            "pairs_done": self.pairs_done,
            "pairs_wanted": self.pairs_wanted,
            "reason": self.reason,
        }


def fisher_p(parent: tuple[int, int], first_bad: tuple[int, int]) -> float:
    """One-sided Fisher exact p that first_bad fails more often than parent; counts are (good, bad)."""
    parent_bad, child_good, child_bad = parent[1], first_bad[0], first_bad[1]
    total_bad = parent_bad + child_bad
    child_runs = child_good + child_bad
    runs = sum(parent) + child_runs
    tail = sum(
        math.comb(total_bad, x) * math.comb(runs - total_bad, child_runs - x)
        for x in range(child_bad, min(total_bad, child_runs) + 1)
    )
    return tail / math.comb(runs, child_runs)


def confirm_pass_fail(
    parent: tuple[int, int],
    first_bad: tuple[int, int],
    *,
    alpha: float = DEFAULT_ALPHA,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    observed: tuple[str, str] | None = None,
) -> Confirmation:
    """Decide on a boundary from the (good, bad) counts at the parent and at the first bad commit. observed: the
    two sides' observations in words (default: their counts)."""
    pairs = min(sum(parent), sum(first_bad))
    p_value = fisher_p(parent, first_bad)
    before, after = observed or (f"{parent[0]} good/{parent[1]} bad", f"{first_bad[0]} good/{first_bad[1]} bad")
    shown = f"last good {before}, first bad {after}"
    if p_value < alpha:
        return Confirmation(ConfirmStatus.CONFIRMED, p_value, pairs, 0, f"reproduced (p={p_value:.3g}): {shown}")
    # Budget left in pairs; an unbalanced side counts its extra runs as pairs already done.
    left = max(0, max_pairs - max(sum(parent), sum(first_bad)))
    wanted = next((r for r in range(1, left + 1) if _clean_p(parent, first_bad, r) < alpha), None)
    if wanted is None:
        return Confirmation(
            ConfirmStatus.NOT_REPRODUCIBLE, p_value, pairs, 0, f"not reproducible within {max_pairs} pairs: {shown}"
        )
    return Confirmation(ConfirmStatus.NEED_MORE, p_value, pairs, wanted, f"p={p_value:.3g} so far: {shown}")


def _clean_p(parent: tuple[int, int], first_bad: tuple[int, int], pairs: int) -> float:
    """The p-value after `pairs` more pairs that all come out clean."""
    return fisher_p((parent[0] + pairs, parent[1]), (first_bad[0], first_bad[1] + pairs))
