"""The posterior over the culprit position when observations can be wrong (flaky tests, noisy metrics).

Model. The culprit c, the first bad position, is uniform over 1..size-1 a priori (the endpoints are known
good and bad). Commit p is bad iff p >= c. Each observation at p (one run of a pass/fail test, or one
decided sample set of a metric) reports the truth with probability 1 - ε and the opposite with probability
ε, the same ε for a spurious failure and a spurious pass, independently. The flake rate ε is unknown and
learned: ε ~ Beta(a, b), integrated out in closed form,

    P(c | observations)  ∝  B(a + W(c), b + N - W(c))

where N counts all observations and W(c) the ones that c calls wrong: bad observations before c plus
good observations at or after c. The learned rate is the posterior mean E[ε] = E_c[(a + W(c)) / (a + b + N)].

W(c) only changes where c passes an observed position, so the posterior is a step function with one block
per gap between observed positions: building it costs O(k log k) for k observed positions, whatever the
size of the range, and a quantile or a CDF value costs O(log k).

Skipped commits cannot be told apart from the next testable commit after them: a culprit among
`s1, s2, t` (s skipped, t testable) looks exactly like culprit t. Answers are therefore ranges
(last testable before, t], as git bisect reports them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class FlakePrior:
    """Beta(a, b) prior on the flake rate ε, used once the observations contradict each other.

    The default Beta(1, 4) has mean 0.2 and the weight of five observations: it leans towards "flaky" so
    that a few consistent runs after a contradiction do not make the model overconfident, and the data
    overrule it after a few dozen runs. ε is assumed below 0.5 (above it good and bad swap meaning); this
    prior puts 6% of its mass above 0.5, which the first observations remove.
    """

    a: float = 1.0
    b: float = 4.0

    def __post_init__(self) -> None:
        if self.a <= 0 or self.b <= 0:
            raise ValueError(f"a Beta prior needs a, b > 0 (got {self.a}, {self.b})")

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)


@dataclass(frozen=True)
class _Block:
    """Culprit positions start..end (inclusive) share one likelihood."""

    start: int
    end: int
    wrong: int  # observations these culprits call wrong: W(c)
    density: float  # posterior mass of each position in the block (normalised)


@dataclass(frozen=True)
class CulpritRange:
    """The culprit lies in (last_good, first_bad] with probability mass."""

    last_good: int
    first_bad: int
    mass: float


class CulpritPosterior:
    """P(culprit = c | observations) for c in 1..size-1, with the flake rate integrated out."""

    def __init__(
        self,
        size: int,
        observations: Mapping[int, tuple[int, int]],
        skipped: frozenset[int] = frozenset(),
        prior: FlakePrior | None = None,
    ) -> None:
        if size < 2:
            raise ValueError(f"a range needs both endpoints (size {size})")
        self.size = size
        self.prior = prior or FlakePrior()
        self.skipped = sorted(p for p in skipped if 1 <= p <= size - 2 and p not in observations)
        self.total = sum(g + b for g, b in observations.values())
        self.blocks = self._blocks(observations)
        self._starts = [block.start for block in self.blocks]
        self._mass_before: list[float] = []  # P(c < block.start)
        cumulative = 0.0
        for block in self.blocks:
            self._mass_before.append(cumulative)
            cumulative += block.density * (block.end - block.start + 1)

    def _blocks(self, observations: Mapping[int, tuple[int, int]]) -> list[_Block]:
        a, b, n = self.prior.a, self.prior.b, self.total
        # c = 1: position 0 lies before the culprit, every other position at or after it.
        wrong = sum(bad if p < 1 else good for p, (good, bad) in observations.items())
        cuts = sorted(p for p in observations if 1 <= p <= self.size - 2)
        spans: list[tuple[int, int, int]] = []
        start = 1
        for p in cuts:
            spans.append((start, p, wrong))
            good, bad = observations[p]
            wrong += bad - good  # past p, the culprit lies after p: p's bad runs become wrong, its good ones right
            start = p + 1
        spans.append((start, self.size - 1, wrong))
        log_weights = [_log_beta(a + w, b + n - w) for _, _, w in spans]
        top = max(log_weights)
        weights = [math.exp(lw - top) for lw in log_weights]
        norm = sum(w * (end - start + 1) for (start, end, _), w in zip(spans, weights, strict=True))
        return [_Block(start, end, w, weight / norm) for (start, end, w), weight in zip(spans, weights, strict=True)]

    def _block_of(self, position: int) -> int:
        return bisect.bisect_right(self._starts, position) - 1

    def cdf(self, position: int) -> float:
        """P(culprit <= position), i.e. the probability that `position` is a bad commit."""
        if position < 1:
            return 0.0
        if position >= self.size - 1:
            return 1.0
        i = self._block_of(position)
        block = self.blocks[i]
        return min(1.0, self._mass_before[i] + (position - block.start + 1) * block.density)

    def position_at(self, quantile: float) -> int:
        """The smallest position whose CDF reaches the quantile (in 1..size-1)."""
        for i, block in enumerate(self.blocks):
            inside = (block.end - block.start + 1) * block.density
            if self._mass_before[i] + inside >= quantile or i == len(self.blocks) - 1:
                steps = math.ceil((quantile - self._mass_before[i]) / block.density) if block.density > 0 else 1
                return max(block.start, min(block.end, block.start + steps - 1))
        raise AssertionError("unreachable: the last block always answers")

    def flake_rate(self) -> float:
        """Posterior mean of ε."""
        a, b, n = self.prior.a, self.prior.b, self.total
        expected_wrong = sum(block.density * (block.end - block.start + 1) * block.wrong for block in self.blocks)
        return (a + expected_wrong) / (a + b + n)

    def best_range(self) -> CulpritRange:
        """The most probable answer: a single commit, or a testable commit with the skipped ones before it."""
        best = CulpritRange(0, 1, -1.0)
        for block in self.blocks:
            for last_good, first_bad in self._groups_in(block):
                mass = (first_bad - last_good) * block.density
                if mass > best.mass:
                    best = CulpritRange(last_good, first_bad, mass)
        return best

    def _groups_in(self, block: _Block) -> list[tuple[int, int]]:
        """The answers (last_good, first_bad] inside a block worth comparing: the widest skip groups and one plain
        commit. Every position in a block has the same density, so a wider group always has more mass."""
        lo = bisect.bisect_left(self.skipped, block.start)
        hi = bisect.bisect_right(self.skipped, block.end)
        groups: list[tuple[int, int]] = []
        run_start: int | None = None
        previous = -2
        for s in self.skipped[lo:hi]:
            if s != previous + 1:
                if run_start is not None:
                    groups.append((run_start - 1, previous + 1))
                run_start = s
            previous = s
        if run_start is not None:
            groups.append((run_start - 1, previous + 1))
        if not groups:
            groups.append((block.start - 1, block.start))
        return groups


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
