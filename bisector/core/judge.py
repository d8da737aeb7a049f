"""What a commit's runs say: a verdict, pass/fail observations, and whether to run it again.

The runs only: bisector/core/ledger.py adds retries, quarantines and the endpoints' roles, and is the one
place a commit's verdict is decided.

One run decides a commit in the plain case (as git bisect does). With --repeat N each probe runs N times;
with --max-repeat M more runs are asked, Pinpoint-style (1 -> 3 -> 7 ...), only while the runs disagree or
the samples sit too close to the threshold (bisector/core/stats.py). With --expect auto the samples are judged
against the endpoints' samples; with --find-fix the roles of good and bad swap.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bisector.core.spec import BisectSpec
from bisector.vocab.domain import StepPurpose, StepRecord, Verdict

RESULT_VERDICTS = (Verdict.GOOD, Verdict.BAD, Verdict.MEASURED)
MANUAL_WEIGHT = 1000  # runs a person's verdict (a manual step) counts as


@dataclass(frozen=True)
class CommitView:
    verdict: Verdict | None  # GOOD / BAD / SKIP for the search, None while undecided
    goods: int = 0  # observations for the noisy strategy: runs, or samples on each side once decided
    bads: int = 0
    samples: tuple[float, ...] = ()
    more_runs: int = 0  # runs still wanted before the verdict stands
    decision: dict[str, object] | None = None  # stats.Decision as JSON, where statistics decided
    by_hand: Verdict | None = None  # a person's verdict (a manual step), which decides the commit

    def observed(self) -> str:
        """The observations in words: a person's verdict as such, never as the runs it weighs as."""
        if self.by_hand is None:
            return f"{self.goods} good/{self.bads} bad"
        goods = self.goods - MANUAL_WEIGHT * (self.by_hand is Verdict.GOOD)
        bads = self.bads - MANUAL_WEIGHT * (self.by_hand is Verdict.BAD)
        runs = f" (its runs: {goods} good/{bads} bad)" if goods + bads else ""
        return f"marked {self.by_hand.value} by hand{runs}"


UNTESTED = CommitView(None)


def run_samples(runs: Sequence[StepRecord]) -> tuple[float, ...]:
    """A commit's metric samples: the last sample of each run with a result."""
    return tuple(s for r in runs if r.verdict in RESULT_VERDICTS for s in r.samples[-1:])


class Judge:
    def __init__(self, spec: BisectSpec) -> None:
        self.spec = spec
        self.metric = spec.metric_spec()
        self.direction = spec.metric_direction()

    @property
    def statistical(self) -> bool:
        """Whether verdicts come from sample statistics rather than from single runs."""
        return self.metric.has_metric and (self.spec.search.repeat_limit > 1 or self.metric.comparative)

    def view(
        self,
        runs: Sequence[StepRecord],
        *,
        endpoint: Verdict | None = None,
        endpoint_samples: tuple[Sequence[float], Sequence[float]] = ((), ()),
    ) -> CommitView:
        """endpoint: GOOD/BAD for the good/bad endpoint in comparative mode (their own samples define them).
        A person's verdict (a manual step: `bisect mark`, `bisect replay`) decides the commit; the latest one wins."""
        manual = [r.verdict for r in runs if r.purpose is StepPurpose.MANUAL and r.verdict is not None]
        if manual:
            return self._manual(self._swap(manual[-1]), [r for r in runs if r.purpose is not StepPurpose.MANUAL])
        if any(r.verdict is Verdict.SKIP for r in runs):
            return CommitView(Verdict.SKIP)
        results = [r for r in runs if r.verdict in RESULT_VERDICTS]
        if not results:
            return UNTESTED
        samples = run_samples(results)
        if self.metric.comparative:
            return self._comparative(samples, endpoint, endpoint_samples)
        if self.statistical:
            return self._threshold(samples)
        return self._pass_fail(results, samples)

    def _manual(self, verdict: Verdict | None, tested: Sequence[StepRecord]) -> CommitView:
        """A person's verdict weighs as MANUAL_WEIGHT agreeing runs beside the test's own runs and samples, so the
        noisy strategy's posterior and a confirmation of the boundary take it as settled (and a confirmation in
        sample mode still ends: its runs add samples)."""
        results = [r for r in tested if r.verdict in (Verdict.GOOD, Verdict.BAD)]
        counts = Counter(self._swap(r.verdict) for r in results)
        samples = run_samples(tested)
        goods = counts[Verdict.GOOD] + MANUAL_WEIGHT * (verdict is Verdict.GOOD)
        bads = counts[Verdict.BAD] + MANUAL_WEIGHT * (verdict is Verdict.BAD)
        return CommitView(verdict, goods, bads, samples, by_hand=verdict)

    def _wanted(self, n: int) -> int:
        return max(self.spec.search.repeat - n, 0)

    def _pass_fail(self, results: Sequence[StepRecord], samples: tuple[float, ...]) -> CommitView:
        counts = Counter(self._swap(r.verdict) for r in results)
        goods, bads = counts[Verdict.GOOD], counts[Verdict.BAD]
        n = goods + bads
        more = self._wanted(n)
        if not more and goods and bads and n < self.spec.search.repeat_limit:
            more = min(self.spec.search.repeat_limit - n, n + 1)  # the runs disagree: ask more, doubling
        if not more and goods == bads:
            more = 1  # seen both ways, equally often: one more run breaks the tie
        if more:
            return CommitView(None, goods, bads, samples, more)
        return CommitView(Verdict.GOOD if goods > bads else Verdict.BAD, goods, bads, samples)

    def _threshold(self, samples: tuple[float, ...]) -> CommitView:
        from bisector.core.stats import decide_threshold, more_samples

        assert self.metric.expect is not None
        decision = decide_threshold(
            samples, self.metric.expect, band=self.spec.search.noise_band, find_fix=self.spec.search.find_fix
        )
        more = self._wanted(len(samples)) or more_samples(decision, max_repeat=self.spec.search.repeat_limit)
        met = sum(1 for s in samples if self.metric.expect.is_met(s))
        return self._decided(decision, samples, more, self._sides(met, len(samples) - met))

    def _comparative(
        self,
        samples: tuple[float, ...],
        endpoint: Verdict | None,
        endpoint_samples: tuple[Sequence[float], Sequence[float]],
    ) -> CommitView:
        from bisector.core.stats import decide_comparative, more_endpoint_samples, more_samples

        more = self._wanted(len(samples))
        good, bad = endpoint_samples
        if endpoint is not None:  # an endpoint is what it is, once the two differ or --max-repeat is spent
            search = self.spec.search
            more = more or more_endpoint_samples(
                len(samples), good, bad, repeat=search.repeat, max_repeat=search.repeat_limit
            )
            if more:
                return CommitView(None, samples=samples, more_runs=more)
            return CommitView(endpoint, int(endpoint is Verdict.GOOD), int(endpoint is Verdict.BAD), samples)
        if len(good) < 2 or len(bad) < 2:
            return CommitView(None, samples=samples, more_runs=more)
        decision = decide_comparative(samples, good, bad)
        more = more or more_samples(decision, max_repeat=self.spec.search.repeat_limit)
        median_good, median_bad = statistics.median(good), statistics.median(bad)
        nearer_good = sum(1 for s in samples if abs(s - median_good) < abs(s - median_bad))
        return self._decided(decision, samples, more, (nearer_good, len(samples) - nearer_good))

    def _sides(self, met: int, missed: int) -> tuple[int, int]:
        """(good, bad) samples from (met, missed) the expectation: with --find-fix a met one is on the new side."""
        return (missed, met) if self.spec.search.find_fix else (met, missed)

    def _decided(self, decision: object, samples: tuple[float, ...], more: int, sides: tuple[int, int]) -> CommitView:
        """sides: the (good, bad) samples, each an observation for the noisy strategy, so that a commit tested again
        adds evidence there."""
        from bisector.core.stats import Decision

        assert isinstance(decision, Decision)
        if more:
            return CommitView(None, samples=samples, more_runs=more, decision=decision.to_json())
        return CommitView(decision.final_verdict(), *sides, samples, 0, decision.to_json())

    def _swap(self, verdict: Verdict | None) -> Verdict | None:
        """With --find-fix the search's "bad" side is the new, fixed state: a passing run."""
        if not self.spec.search.find_fix or verdict is None:
            return verdict
        return {Verdict.GOOD: Verdict.BAD, Verdict.BAD: Verdict.GOOD}.get(verdict, verdict)
