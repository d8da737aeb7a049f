"""A process-free harness: the real strategies against simulated histories with flakes and metric noise.

A `History` is a range of `size` commits, position 0 the good endpoint, `culprit` the first bad commit,
size-1 the bad endpoint (both endpoints are taken as known, as `git bisect start BAD GOOD` does; no run
is spent on them unless a tester needs their samples). One run of the test at a commit:

* flips the commit's state with probability `flake_rate` (a flaky run: infrastructure, a race); with
  `one_sided`, only a commit in the old state flakes (a good commit that sometimes fails);
* pass/fail test (`noise_sigma` None): reports pass (1.0) or fail (0.0), judged by `pass rate >= 0.5`;
* metric test: reports the fine level (1.0) or the broken level (0.0) plus Gaussian noise of
  `noise_sigma` (in units of the effect), judged by `>= 0.5` (higher is better) or, with
  `direction=LOWER`, the mirrored levels and `<= 0.5`.

With `find_fix` the old state is the broken one and the culprit is the commit that fixed it.

A `Tester` turns one probe of a commit into one verdict (a single run, a majority vote, escalating
repeats with statistics); the strategy sees one observation per probe. Time: every run takes one unit
on its slot, a probe's runs go back to back, `slots` probes run at once; `rounds` is the makespan.
Deterministic given the seed. Needs the `stats` extra (the testers use bisector.core.stats); used by the
tests and benchmarks/bench_noise.py, never by the coordinator. benchmarks/simulate_core.py runs the same
histories through the coordinator's own decision core instead of a tester and strategy.
"""

from __future__ import annotations

import functools
import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from bisector.core.confirm import DEFAULT_ALPHA as DEFAULT_CONFIRM_ALPHA
from bisector.core.confirm import DEFAULT_MAX_PAIRS as DEFAULT_CONFIRM_MAX_PAIRS
from bisector.core.confirm import ConfirmStatus, confirm_pass_fail
from bisector.core.stats import DEFAULT_ALPHA, Decision, decide_comparative, decide_threshold, more_samples
from bisector.core.strategies import Outcome, OutcomeKind, SearchState, Strategy
from bisector.vocab.domain import Verdict
from bisector.vocab.metric import Direction, Expectation

DEFAULT_MAX_RUNS = 5000
PINPOINT_SCHEDULE = (10, 20, 40, 80, 160)


@dataclass(frozen=True)
class History:
    size: int  # positions, endpoints included
    culprit: int  # the first bad position, 1..size-1
    flake_rate: float = 0.0  # probability that one run reports the other state
    one_sided: bool = False  # only runs of old-state commits flake (a good commit failing now and then)
    noise_sigma: float | None = None  # None: a pass/fail test; else metric noise in units of the effect
    skips: frozenset[int] = frozenset()  # untestable commits (build fails)
    direction: Direction = Direction.HIGHER
    find_fix: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.culprit <= self.size - 1:
            raise ValueError(f"culprit {self.culprit} outside 1..{self.size - 1}")
        if not 0 <= self.flake_rate < 0.5:
            raise ValueError(f"flake_rate must lie in [0, 0.5) (got {self.flake_rate})")
        if any(not 0 < s < self.size - 1 for s in self.skips):
            raise ValueError("skips must be inner positions")

    @property
    def expectation(self) -> Expectation:
        """What a single good run looks like: a pass (1.0) or the fine metric level."""
        if self.noise_sigma is not None and self.direction is Direction.LOWER:
            return Expectation("<=", 0.5)
        return Expectation(">=", 0.5)

    def is_new(self, position: int) -> bool:
        """Whether the commit has the change: the search's BAD side."""
        return position >= self.culprit

    def level(self, broken: bool) -> float:
        """The mean of one run: pass 1.0 / fail 0.0; a metric's fine level 1.0 (0.0 when lower is better)."""
        high = not broken
        if self.noise_sigma is not None and self.direction is Direction.LOWER:
            high = broken
        return 1.0 if high else 0.0


class World:
    """One simulated bisect's randomness and run counter; pools of samples per commit for testers that keep them."""

    def __init__(self, history: History, rng: random.Random) -> None:
        self.history = history
        self.rng = rng
        self.runs = 0
        self.pools: dict[int, list[float]] = {}

    def run(self, position: int) -> float:
        self.runs += 1
        history = self.history
        broken = history.is_new(position) != history.find_fix
        flaky = not history.one_sided or not history.is_new(position)
        if history.flake_rate and flaky and self.rng.random() < history.flake_rate:
            broken = not broken
        level = history.level(broken)
        if history.noise_sigma is None:
            return level
        return level + self.rng.gauss(0.0, history.noise_sigma)

    def top_up(self, position: int, count: int) -> list[float]:
        """The commit's sample pool, run until it holds at least `count` samples."""
        pool = self.pools.setdefault(position, [])
        while len(pool) < count:
            pool.append(self.run(position))
        return pool


class Tester(Protocol):
    """How one probe of a commit becomes one verdict (GOOD or BAD)."""

    def probe(self, world: World, position: int) -> Verdict: ...


@dataclass(frozen=True)
class SingleRun:
    """git bisect: one run, its verdict trusted."""

    def probe(self, world: World, position: int) -> Verdict:
        history = world.history
        met = history.expectation.is_met(world.run(position))
        return Verdict.GOOD if met != history.find_fix else Verdict.BAD


@dataclass(frozen=True)
class MajorityVote:
    """syz-bisect style: k runs, the majority of their verdicts (a tie counts as bad)."""

    k: int = 10

    def probe(self, world: World, position: int) -> Verdict:
        history = world.history
        bad_runs = sum(history.expectation.is_met(world.run(position)) == history.find_fix for _ in range(self.k))
        return Verdict.BAD if 2 * bad_runs >= self.k else Verdict.GOOD


@dataclass(frozen=True)
class EscalatingComparison:
    """Pinpoint style: 10 -> 20 -> 40 -> 80 -> 160 samples while undecided, compared (MWU/KS) with samples of
    both endpoints topped up to the same count; the nearer endpoint once the schedule is spent."""

    schedule: tuple[int, ...] = PINPOINT_SCHEDULE
    alpha: float = DEFAULT_ALPHA

    def probe(self, world: World, position: int) -> Verdict:
        last = world.history.size - 1
        decision: Decision | None = None
        samples: list[float] = []
        for count in self.schedule:
            while len(samples) < count:
                samples.append(world.run(position))
            good, bad = world.top_up(0, count), world.top_up(last, count)
            if world.history.noise_sigma is None:
                decision = _compare_pass_fail(_counts(samples), _counts(good), _counts(bad), self.alpha)
            else:
                decision = decide_comparative(samples, good, bad, alpha=self.alpha)
            if decision.decided:
                break
        assert decision is not None
        return decision.final_verdict() or Verdict.BAD


def _counts(samples: Sequence[float]) -> tuple[int, int]:
    passes = int(sum(samples))
    return len(samples) - passes, passes


@functools.lru_cache(maxsize=1 << 16)
def _compare_pass_fail(samples: tuple[int, int], good: tuple[int, int], bad: tuple[int, int], alpha: float) -> Decision:
    """decide_comparative on 0/1 samples depends only on the counts: computed once per count triple."""

    def expand(counts: tuple[int, int]) -> list[float]:
        return [0.0] * counts[0] + [1.0] * counts[1]

    return decide_comparative(expand(samples), expand(good), expand(bad), alpha=alpha)


@dataclass(frozen=True)
class AdaptiveThreshold:
    """Ours: 1 sample, then +2, +4, ... while the threshold decision is uncertain (median inside the noise
    band, t-test not significant), up to max_repeat; the lean when still undecided."""

    band: float = 0.0
    max_repeat: int = 15
    alpha: float = DEFAULT_ALPHA

    def probe(self, world: World, position: int) -> Verdict:
        history = world.history
        samples = [world.run(position)]
        while True:
            decision = decide_threshold(
                samples, history.expectation, band=self.band, alpha=self.alpha, find_fix=history.find_fix
            )
            wanted = more_samples(decision, max_repeat=self.max_repeat)
            if wanted == 0:
                return decision.final_verdict() or Verdict.BAD
            samples.extend(world.run(position) for _ in range(wanted))


@dataclass(frozen=True)
class ConfirmPolicy:
    """Confirm the boundary with interleaved (parent, first_bad) probes, Fisher's test on the verdict counts."""

    alpha: float = DEFAULT_CONFIRM_ALPHA
    max_pairs: int = DEFAULT_CONFIRM_MAX_PAIRS


class SimStatus(StrEnum):
    FOUND = "found"
    AMBIGUOUS = "ambiguous"  # a range beside skipped commits
    NOT_REPRODUCIBLE = "not_reproducible"  # the confirmation refused the boundary
    BUDGET = "budget"  # max_runs spent without an answer
    ENDPOINTS_MISMATCH = "endpoints_mismatch"  # an endpoint was found in the other state (the product's core)
    FAILED = "failed"  # the product's core gave up (an untestable endpoint)


@dataclass(frozen=True)
class SimResult:
    status: SimStatus
    last_good: int | None
    first_bad: int | None
    correct: bool  # the named range contains the culprit (a single commit when FOUND)
    runs: int  # every run of the test, confirmation and endpoint samples included
    confirm_runs: int
    rounds: int  # makespan in run durations
    confidence: float | None
    reference_runs: int = 0  # the product's core: runs of the endpoints that check a worker's health
    quarantined: tuple[str, ...] = ()  # the product's core: workers whose results stopped counting


@dataclass(order=True)
class _Job:
    finish: int
    tiebreak: float
    positions: tuple[int, ...] = field(compare=False)
    verdicts: tuple[Verdict, ...] = field(compare=False)
    confirming: bool = field(compare=False)


class _Simulation:
    def __init__(
        self,
        strategy: Strategy,
        history: History,
        tester: Tester,
        slots: int,
        seed: int,
        confirm: ConfirmPolicy | None,
        max_runs: int,
    ) -> None:
        self.strategy, self.history, self.tester = strategy, history, tester
        self.slots, self.confirm, self.max_runs = slots, confirm, max_runs
        self.world = World(history, random.Random(seed))
        self.verdicts: dict[int, Verdict] = {0: Verdict.GOOD, history.size - 1: Verdict.BAD}
        # The endpoints' known verdicts count as one observation each, as the coordinator's verification runs do.
        self.observations: dict[int, tuple[int, int]] = {0: (1, 0), history.size - 1: (0, 1)}
        self.queue: list[_Job] = []
        self.now = 0
        self.confirm_runs = 0

    def state(self) -> SearchState:
        in_flight = frozenset(p for job in self.queue for p in job.positions)
        return SearchState(self.history.size, dict(self.verdicts), in_flight, dict(self.observations))

    def run(self) -> SimResult:
        while self.world.runs <= self.max_runs:
            outcome = self.strategy.outcome(self.state())
            if outcome is not None:
                self.queue = [job for job in self.queue if job.confirming]
                heapq.heapify(self.queue)
                if not self.queue:
                    finished = self.conclude(outcome)
                    if finished is not None:
                        return finished
            else:
                free = self.slots - len(self.queue)
                for position in self.strategy.next_probes(self.state(), free) if free > 0 else []:
                    self.launch((position,), confirming=False)
            if not self.queue:
                raise RuntimeError(f"{self.strategy.name}: no outcome and nothing to run")
            self.complete(heapq.heappop(self.queue))
        return self.result(SimStatus.BUDGET, None, None)

    def conclude(self, outcome: Outcome) -> SimResult | None:
        """The result, or None after launching confirmation pairs."""
        status = SimStatus.FOUND if outcome.kind is OutcomeKind.FOUND else SimStatus.AMBIGUOUS
        if self.confirm is None:
            return self.result(status, outcome, outcome.confidence)
        counts = self.state().observed()
        lo, hi = outcome.last_good, outcome.first_bad
        verdict = confirm_pass_fail(
            counts.get(lo, (0, 0)), counts.get(hi, (0, 0)), alpha=self.confirm.alpha, max_pairs=self.confirm.max_pairs
        )
        if verdict.status is ConfirmStatus.CONFIRMED:
            return self.result(status, outcome, verdict.confidence)
        if verdict.status is ConfirmStatus.NOT_REPRODUCIBLE:
            return self.result(SimStatus.NOT_REPRODUCIBLE, outcome, verdict.confidence)
        for _ in range(min(verdict.pairs_wanted, self.slots)):
            before = self.world.runs
            self.launch((lo, hi), confirming=True)
            self.confirm_runs += self.world.runs - before
        return None

    def launch(self, positions: tuple[int, ...], *, confirming: bool) -> None:
        before = self.world.runs
        verdicts = tuple(self.test(p) for p in positions)
        duration = self.world.runs - before
        heapq.heappush(self.queue, _Job(self.now + duration, self.world.rng.random(), positions, verdicts, confirming))

    def test(self, position: int) -> Verdict:
        if position in self.history.skips:
            self.world.runs += 1
            return Verdict.SKIP
        return self.tester.probe(self.world, position)

    def complete(self, job: _Job) -> None:
        self.now = job.finish
        for position, verdict in zip(job.positions, job.verdicts, strict=True):
            self.verdicts[position] = verdict
            if verdict.decides:
                good, bad = self.observations.get(position, (0, 0))
                self.observations[position] = (good + 1, bad) if verdict is Verdict.GOOD else (good, bad + 1)

    def result(self, status: SimStatus, outcome: Outcome | None, confidence: float | None) -> SimResult:
        lo = outcome.last_good if outcome else None
        hi = outcome.first_bad if outcome else None
        named = status in (SimStatus.FOUND, SimStatus.AMBIGUOUS)
        correct = named and lo is not None and hi is not None and lo < self.history.culprit <= hi
        return SimResult(status, lo, hi, correct, self.world.runs, self.confirm_runs, self.now, confidence)


def simulate(
    strategy: Strategy,
    history: History,
    tester: Tester | None = None,
    *,
    slots: int = 1,
    seed: int = 0,
    confirm: ConfirmPolicy | None = None,
    max_runs: int = DEFAULT_MAX_RUNS,
) -> SimResult:
    """Run one bisect of `history` with the strategy to its answer. Deterministic given the seed."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1 (got {slots})")
    return _Simulation(strategy, history, tester or SingleRun(), slots, seed, confirm, max_runs).run()


__all__ = [
    "PINPOINT_SCHEDULE",
    "AdaptiveThreshold",
    "ConfirmPolicy",
    "EscalatingComparison",
    "History",
    "MajorityVote",
    "SimResult",
    "SimStatus",
    "SingleRun",
    "Tester",
    "World",
    "simulate",
]
