"""Decisions over repeated samples of one commit's metric: threshold, comparative, repeats, confirmation.

Pure functions over sample lists. scipy (the `stats` extra) is imported here and nowhere else in the core.
Every decision says GOOD (like the good, old endpoint), BAD (like the bad, new one) or UNCERTAIN (more
samples wanted), and which side it leans to, which is the verdict if the repeats run out undecided.

Threshold mode, `--expect '>= 4.0'` with an optional noise band b (absolute, in the metric's units):
  * the median decides when it lies more than b from the threshold (b = 0: it always decides, as a single
    run does without repeats);
  * inside the band, a one-sided one-sample t-test of the mean against the threshold decides when
    p < alpha (same side as the mean);
  * otherwise UNCERTAIN.
  The p-value reported is that t-test's (None below two samples).

Comparative mode, `--expect auto`: the commit's samples against both endpoints' samples.
  p_good = min(Mann-Whitney U p, Kolmogorov-Smirnov p) against the good endpoint (two-sided), p_bad
  likewise against the bad one, as Pinpoint does; t = (median - median_good) / (median_bad - median_good)
  places the commit between the endpoints (0 good, 1 bad).
  BAD when p_good < alpha and t >= min_effect: distinguishable from the good set and moved at least that
  fraction of the way to the bad one; GOOD when p_bad < alpha and t <= 1 - min_effect; when both hold
  (possible only with min_effect < 0.5) the nearer endpoint wins; else UNCERTAIN.
  Defaults: alpha = 0.01, min_effect = 0.5, i.e. "distinguishable from the good set and closer to the bad
  one". A min of two p-values is slightly liberal (at most 2·alpha under the null); the noisy strategy's
  flake model absorbs the rare wrong decision.

find_fix (`--find-fix`): the search looks for the commit that fixed the metric, so the old state is the
broken one. In threshold mode GOOD (like the old endpoint) then means "violates the expectation". The
comparative mode needs no swap (it compares with the endpoints' own samples); `check_endpoints` uses
direction and find_fix to verify that the new endpoint is worse (or, with find_fix, better).

Adaptive repeats (`more_samples`): 0 once decided or at max_repeat; else n + 1 more, so the counts go
1 -> 3 -> 7 -> 15 ... (Pinpoint-style doubling), asked only while the decision is UNCERTAIN. The endpoints of
`--expect auto` double the same way while their sample sets do not differ (`more_endpoint_samples`).
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from scipy import stats as scipy_stats
from scipy.special import stdtr

from bisector.core.confirm import DEFAULT_ALPHA as DEFAULT_CONFIRM_ALPHA
from bisector.core.confirm import DEFAULT_MAX_PAIRS as DEFAULT_CONFIRM_MAX_PAIRS
from bisector.core.confirm import Confirmation, ConfirmStatus
from bisector.vocab.domain import Verdict
from bisector.vocab.metric import Direction, Expectation

DEFAULT_ALPHA = 0.01
DEFAULT_MIN_EFFECT = 0.5


class Call(StrEnum):
    """What the samples say about one commit."""

    GOOD = "good"  # like the good (old) endpoint
    BAD = "bad"  # like the bad (new) endpoint
    UNCERTAIN = "uncertain"  # not decided yet: more samples wanted

    @property
    def verdict(self) -> Verdict | None:
        return {Call.GOOD: Verdict.GOOD, Call.BAD: Verdict.BAD}.get(self)

    def swapped(self) -> Call:
        return {Call.GOOD: Call.BAD, Call.BAD: Call.GOOD}.get(self, self)


@dataclass(frozen=True)
class Decision:
    """One commit's decision over its samples, stored as JSON with the commit's samples."""

    call: Call
    lean: Call  # GOOD or BAD: the side of the point estimate (UNCERTAIN only without samples)
    n: int  # samples of this commit behind the decision
    p_value: float | None  # of the test behind the call; None when no test applied (n < 2)
    reason: str

    @property
    def decided(self) -> bool:
        return self.call is not Call.UNCERTAIN

    def final_verdict(self) -> Verdict | None:
        """The verdict to record: the call, or the lean once the repeats are spent."""
        return self.call.verdict or self.lean.verdict

    def to_json(self) -> dict[str, object]:
        return {
            "call": self.call.value,
            "lean": self.lean.value,
            "n": self.n,
            "p_value": self.p_value,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Decision:
        p_value = data.get("p_value")
        return cls(
            Call(str(data["call"])),
            Call(str(data["lean"])),
            int(str(data["n"])),
            float(str(p_value)) if p_value is not None else None,
            str(data.get("reason", "")),
        )


def _finish(call: Call, lean: Call, n: int, p_value: float | None, reason: str, find_fix: bool) -> Decision:
    if find_fix:
        return Decision(call.swapped(), lean.swapped(), n, p_value, f"{reason} (find-fix: roles swapped)")
    return Decision(call, lean, n, p_value, reason)


def decide_threshold(
    samples: Sequence[float],
    expect: Expectation,
    *,
    band: float = 0.0,
    alpha: float = DEFAULT_ALPHA,
    find_fix: bool = False,
) -> Decision:
    """GOOD / BAD / UNCERTAIN for samples against `expect`, with a noise band of `band` around the threshold."""
    if band < 0:
        raise ValueError(f"the noise band must be >= 0 (got {band})")
    n = len(samples)
    if n == 0:
        return Decision(Call.UNCERTAIN, Call.UNCERTAIN, 0, None, "no samples")
    center = statistics.median(samples)
    lean = Call.GOOD if expect.is_met(center) else Call.BAD
    p_value = _one_sample_p(samples, expect.threshold)
    shown = f"median {center:g} of {n} vs {expect}"
    if band == 0 or abs(center - expect.threshold) > band:
        return _finish(lean, lean, n, p_value, f"{shown}: outside the band ±{band:g}", find_fix)
    if p_value is not None and p_value < alpha:
        side = Call.GOOD if expect.is_met(statistics.fmean(samples)) else Call.BAD
        return _finish(side, side, n, p_value, f"{shown}: inside the band, t-test p={p_value:.3g}", find_fix)
    return _finish(Call.UNCERTAIN, lean, n, p_value, f"{shown}: inside the band ±{band:g}, not significant", find_fix)


def _one_sample_p(samples: Sequence[float], threshold: float) -> float | None:
    """One-sided p of a t-test of mean != threshold, on the side the mean lies (None below two samples).

    Computed from the t statistic directly: scipy's ttest_1samp warns on identical samples, which are
    common here (integer metrics, pass/fail encoded as 0/1) and mean a deterministic result.
    """
    n = len(samples)
    if n < 2:
        return None
    mean = math.fsum(samples) / n
    variance = math.fsum((x - mean) ** 2 for x in samples) / (n - 1)
    if variance == 0:
        return 1.0 if mean == threshold else 0.0
    t = abs(mean - threshold) / math.sqrt(variance / n)
    return float(stdtr(n - 1, -t))


def samples_to_distinguish(alpha: float = DEFAULT_ALPHA) -> int:
    """The fewest samples per side with which distinguishable_p can fall below alpha: with n and n samples no
    overlap gives the exact two-sided p 2 / C(2n, n) (0.1 at n = 3, 0.029 at 4, 0.0079 at 5)."""
    n = 1
    while 2 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def distinguishable_p(a: Sequence[float], b: Sequence[float]) -> float:
    """min(Mann-Whitney U p, Kolmogorov-Smirnov p), two-sided; 1.0 when either set is empty or all values tie."""
    if not a or not b:
        return 1.0
    if min(a) == max(a) == min(b) == max(b):
        return 1.0  # both tests are undefined without any spread; nothing distinguishes the sets
    mwu = scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
    with warnings.catch_warnings():
        # On small, heavily tied sets (pass/fail as 0/1) the exact KS p rounds to just above 1 when D is the
        # smallest step; scipy then warns and uses the asymptotic p-value, which is the right answer (~1).
        warnings.filterwarnings("ignore", message="ks_2samp: Exact calculation unsuccessful", category=RuntimeWarning)
        ks = scipy_stats.ks_2samp(a, b).pvalue
    return float(min(mwu, ks))


def decide_comparative(
    samples: Sequence[float],
    good_samples: Sequence[float],
    bad_samples: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = DEFAULT_MIN_EFFECT,
) -> Decision:
    """GOOD / BAD / UNCERTAIN: is the commit's sample set distinguishable from one endpoint's and nearer the other's."""
    if not 0 < min_effect <= 1:
        raise ValueError(f"min_effect is a fraction of the endpoints' gap in (0, 1] (got {min_effect})")
    n = len(samples)
    if n == 0 or not good_samples or not bad_samples:
        return Decision(Call.UNCERTAIN, Call.UNCERTAIN, n, None, "no samples at the commit or at an endpoint")
    median_good, median_bad = statistics.median(good_samples), statistics.median(bad_samples)
    gap = median_bad - median_good
    if gap == 0:
        return Decision(Call.UNCERTAIN, Call.UNCERTAIN, n, None, "the endpoints' medians are equal")
    position = (statistics.median(samples) - median_good) / gap
    lean = Call.BAD if position >= 0.5 else Call.GOOD
    # Only a side the commit has moved far enough towards can be called; the other p-value is not needed.
    p_good = distinguishable_p(samples, good_samples) if position >= min_effect else None
    p_bad = distinguishable_p(samples, bad_samples) if position <= 1 - min_effect else None
    shown = f"at {position:.2f} of the way good->bad, p vs good {_show(p_good)}, p vs bad {_show(p_bad)}, n={n}"
    like_bad = p_good is not None and p_good < alpha
    like_good = p_bad is not None and p_bad < alpha
    if like_bad and (not like_good or lean is Call.BAD):
        return Decision(Call.BAD, Call.BAD, n, p_good, shown)
    if like_good:
        return Decision(Call.GOOD, Call.GOOD, n, p_bad, shown)
    return Decision(Call.UNCERTAIN, lean, n, p_good if lean is Call.BAD else p_bad, shown)


def _show(p_value: float | None) -> str:
    return "-" if p_value is None else f"{p_value:.3g}"


class EndpointsCheck(StrEnum):
    DISTINCT = "distinct"  # the new endpoint differs, the expected way: there is something to bisect
    NOT_DISTINCT = "not_distinct"  # no significant difference (yet): more endpoint samples, or no regression
    WRONG_WAY = "wrong_way"  # significant, but the new endpoint is better (worse, with find_fix)


def check_endpoints(
    good_samples: Sequence[float],
    bad_samples: Sequence[float],
    *,
    direction: Direction,
    find_fix: bool = False,
    alpha: float = DEFAULT_ALPHA,
) -> tuple[EndpointsCheck, float]:
    """Whether the endpoints' samples differ, and the way a regression (or, with find_fix, a fix) does."""
    p_value = distinguishable_p(good_samples, bad_samples)
    if p_value >= alpha:
        return EndpointsCheck.NOT_DISTINCT, p_value
    new_is_higher = statistics.median(bad_samples) > statistics.median(good_samples)
    new_is_better = new_is_higher == (direction is Direction.HIGHER)
    return (EndpointsCheck.DISTINCT if new_is_better == find_fix else EndpointsCheck.WRONG_WAY), p_value


def more_endpoint_samples(
    own: int, good: Sequence[float], bad: Sequence[float], *, repeat: int, max_repeat: int, alpha: float = DEFAULT_ALPHA
) -> int:
    """More samples at an endpoint holding `own` while the endpoints' sample sets do not differ yet (p >= alpha) and
    max_repeat allows: both endpoints go to the next count of the doubling from `repeat` (n -> 2n + 1, at most
    max_repeat), compared again as the samples come in. 0 once they differ (either way), before both hold `repeat`,
    and once both hold max_repeat: then `check_endpoints` calls them alike or the wrong way round."""
    held = min(len(good), len(bad))
    if held < repeat or distinguishable_p(good, bad) < alpha:
        return 0
    level = repeat  # the largest count of the doubling both endpoints hold
    while level < max_repeat and min(2 * level + 1, max_repeat) <= held:
        level = min(2 * level + 1, max_repeat)
    if level >= max_repeat:
        return 0
    return max(min(2 * level + 1, max_repeat) - own, 0)


def more_samples(decision: Decision, *, max_repeat: int) -> int:
    """How many more samples the commit needs: 0 when decided or at max_repeat, else n + 1 (1, 3, 7, 15, ...)."""
    if decision.decided or decision.n >= max_repeat:
        return 0
    return min(max_repeat - decision.n, decision.n + 1)


def confirm_samples(
    parent_samples: Sequence[float],
    first_bad_samples: Sequence[float],
    *,
    direction: Direction | None = None,
    find_fix: bool = False,
    alpha: float = DEFAULT_CONFIRM_ALPHA,
    max_pairs: int = DEFAULT_CONFIRM_MAX_PAIRS,
) -> Confirmation:
    """Confirmation of a metric boundary from the samples at the first bad commit and at its parent.

    CONFIRMED when min(MWU p, KS p) < alpha and, if direction is given, first_bad is worse than its parent
    (better, with find_fix); NOT_REPRODUCIBLE when the difference is significant the wrong way, or once
    max_pairs pairs are in without significance; else NEED_MORE,
    doubling the pairs run so far (at least 2 samples a side first: one sample cannot be tested).
    """
    pairs = min(len(parent_samples), len(first_bad_samples))
    p_value = distinguishable_p(parent_samples, first_bad_samples)
    right_way = True
    if direction is not None and parent_samples and first_bad_samples:
        higher = statistics.median(first_bad_samples) > statistics.median(parent_samples)
        right_way = (higher == (direction is Direction.HIGHER)) == find_fix
    runs = f"{len(parent_samples)} run(s) of the last good commit and {len(first_bad_samples)} of the first bad commit"
    shown = f"p={p_value:.3g} over {runs}"  # the search's runs there too: no pairs of their own
    if p_value < alpha and right_way:
        return Confirmation(ConfirmStatus.CONFIRMED, p_value, pairs, 0, f"reproduced: {shown}")
    if p_value < alpha:  # significant, but the first bad commit is the better one: not this regression
        return Confirmation(
            ConfirmStatus.NOT_REPRODUCIBLE, p_value, pairs, 0, f"the difference goes the wrong way: {shown}"
        )
    if pairs >= max_pairs:
        return Confirmation(ConfirmStatus.NOT_REPRODUCIBLE, p_value, pairs, 0, f"no significant difference: {shown}")
    wanted = min(max_pairs - pairs, max(2 - pairs, pairs))
    return Confirmation(ConfirmStatus.NEED_MORE, p_value, pairs, wanted, f"not yet significant: {shown}")
