"""The posterior over the culprit position when observations can be wrong (flaky tests, noisy metrics).

Model. The culprit c, the first bad position, is uniform over 1..size-1 a priori (the endpoints are known
good and bad). Commit p is bad iff p >= c. Each observation at p (one run of a pass/fail test, or one
decided sample set of a metric) reports the truth with probability 1 - ε and the opposite with probability
ε, the same ε for a spurious failure and a spurious pass, independently. The flake rate ε is unknown and
learned: ε ~ Beta(a, b) truncated to [0, 1/2), integrated out in closed form,

    P(c | observations)  ∝  B(α, β) · I_{1/2}(α, β),    α = a + W(c),  β = b + N - W(c)

where N counts all observations, W(c) the ones that c calls wrong (bad observations before c plus good
observations at or after c) and I_{1/2} is the regularized incomplete beta function at 1/2. The
truncation is what makes the model identifiable: without it, "every commit bad, ε = 0.95" explains a run
of good observations as well as "culprit at the end, ε = 0.05" does, and the first hypothesis has
hundreds of positions to collect prior mass from. The learned rate is the posterior mean of ε.

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
    overrule it after a few dozen runs. It is truncated to ε < 0.5 (above it good and bad swap meaning).
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
        log_weights = [_log_beta(a + w, b + n - w) + _log_cdf_half(a + w, b + n - w) for _, _, w in spans]
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
        """Posterior mean of ε: E[ε | c] = α/(α+β) · I_{1/2}(α+1, β) / I_{1/2}(α, β), averaged over c."""
        a, b, n = self.prior.a, self.prior.b, self.total
        rate = 0.0
        for block in self.blocks:
            mass = block.density * (block.end - block.start + 1)
            if mass > 1e-15:
                alpha, beta = a + block.wrong, b + n - block.wrong
                truncation = math.exp(_log_cdf_half(alpha + 1, beta) - _log_cdf_half(alpha, beta))
                rate += mass * alpha / (alpha + beta) * truncation
        return rate

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


def _log_cdf_half(a: float, b: float) -> float:
    """log I_{1/2}(a, b) = log P(X < 1/2) for X ~ Beta(a, b), by symmetry and a continued fraction."""
    if a == b:
        return -math.log(2.0)
    if a < b:
        # 1 - I_{1/2}(b, a); the tail is usually far below double precision, so skip it when its bound is.
        log_tail_bound = (a + b) * math.log(0.5) - _log_beta(a, b) - math.log(b) + math.log(2.0 * (b + 1.0))
        if log_tail_bound < -50.0:
            return 0.0
        return math.log1p(-math.exp(_log_cdf_half(b, a)))
    log_front = (a + b) * math.log(0.5) - _log_beta(a, b) - math.log(a)
    return log_front + math.log(_beta_continued_fraction(a, b, 0.5))


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), fast when x < (a + 1) / (a + b + 2)."""
    tiny, epsilon = 1e-300, 1e-15
    d = 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    c, h = 1.0, d
    for m in range(1, 100_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1.0) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1.0)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < epsilon:
            return h
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}")
