"""The product's simulator: a simulated history bisected by the coordinator's own decision core
(bisector/core/decide.py), with every run's result drawn from `World` instead of a test process.

So what the noise benchmark measures is what users run: endpoint checks (lazy or first), retries, adaptive
repeats, the noisy strategy chosen as the product chooses it, confirmation pairs. Time: every run takes one
unit on its worker; `rounds` is the makespan; the runs that end in one unit are taken in together before the
next decision, as the search loop gathers a round (bisector/runner/loop.py). Deterministic given the seed.
Pass/fail histories use the steps' verdicts; metric histories (`noise_sigma`) also report each run's value as a
sample. `faults` makes workers broken (`WorkerFault`): what they report ignores the commit, as a bad GPU's or a
broken slot's runs do, and the core's worker health check is what must find them.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from simulate import DEFAULT_MAX_RUNS, History, SimResult, SimStatus, World

from bisector.core.actions import Cancel, Descend, Finish, Submit
from bisector.core.decide import SearchCore
from bisector.core.ledger import Ledger
from bisector.core.options import VerifyEndpoints
from bisector.core.records import SearchRecords
from bisector.core.spec import BisectSpec
from bisector.vocab.domain import BisectStatus, Commit, StepPurpose, StepRecord, StepResult, Verdict

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
STATUSES = {
    BisectStatus.FOUND: SimStatus.FOUND,
    BisectStatus.AMBIGUOUS: SimStatus.AMBIGUOUS,
    BisectStatus.NOT_REPRODUCIBLE: SimStatus.NOT_REPRODUCIBLE,
    BisectStatus.ENDPOINTS_MISMATCH: SimStatus.ENDPOINTS_MISMATCH,
}


class WorkerFault(StrEnum):
    """How a broken worker's pass/fail runs go wrong, whatever the commit."""

    FAILS = "fails"  # every test fails (a missing library, a full disk)
    PASSES = "passes"  # every test passes (a test that never runs)
    INVERTS = "inverts"  # every answer the opposite of the truth
    MOSTLY_FAILS = "mostly-fails"  # 3 runs in 4 fail, the others answer truly (a bad GPU)


MOSTLY_FAILS_RATE = 0.75


@dataclass(frozen=True)
class ProductOptions:
    """The search options a user gives (`bisect start`), as far as they shape the decisions."""

    strategy: str | None = None
    repeat: int = 1
    max_repeat: int | None = None
    confirm: bool | None = None
    verify_endpoints: str | None = None
    noise_band: float = 0.0
    expect: str | None = None  # a metric history's expectation: "auto" compares with the endpoints' samples


@dataclass(order=True)
class _Run:
    finish: int
    tiebreak: float
    step_id: int = field(compare=False)
    worker: str = field(compare=False)
    result: StepResult = field(compare=False)


def simulate_core(
    history: History,
    options: ProductOptions | None = None,
    *,
    slots: int = 1,
    seed: int = 0,
    max_runs: int = DEFAULT_MAX_RUNS,
    faults: Mapping[str, WorkerFault] | None = None,
) -> SimResult:
    """One bisect of `history` by the decision core, to its answer (or max_runs). Workers are named sim-0,
    sim-1, ...; `faults` breaks some of them (pass/fail histories only)."""
    return _CoreSimulation(history, options or ProductOptions(), slots, seed, max_runs, faults or {}).run()


class _CoreSimulation:
    def __init__(
        self,
        history: History,
        options: ProductOptions,
        slots: int,
        seed: int,
        max_runs: int,
        faults: Mapping[str, WorkerFault],
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1 (got {slots})")
        if faults and history.noise_sigma is not None:
            raise ValueError("worker faults are simulated for pass/fail histories only")
        self.history, self.max_runs, self.faults = history, max_runs, faults
        self.world = World(history, random.Random(seed))
        self.spec = _spec(history, options, slots)
        self.candidates = [Commit(p, f"{p:040x}", f"commit {p}", "sim", EPOCH) for p in range(history.size)]
        ledger = Ledger(self.spec, self.candidates, self.candidates[-1].sha)
        verify = VerifyEndpoints.chosen(self.spec.search.verify_endpoints)
        self.core = SearchCore(0, ledger, SearchRecords(), verify=verify)
        self.workers = [f"sim-{i}" for i in range(slots)]
        self.queue: list[_Run] = []
        self.now = 0
        self.step_ids = 0
        self.confirm_runs = 0
        self.reference_runs = 0

    def run(self) -> SimResult:
        while self.world.runs <= self.max_runs:
            busy = {r.worker for r in self.queue}
            for action in self.core.decide([w for w in self.workers if w not in busy], self.workers):
                if isinstance(action, Finish):
                    return self.result(action)
                if isinstance(action, Submit):
                    self.submit(action)
                elif isinstance(action, Cancel):
                    self.cancel(action.step_id)
                elif isinstance(action, Descend):
                    self.core.no_branch(action.merge)  # simulated histories have no merges
            if self.queue:  # the runs that end together are taken together, as the loop gathers a round
                self.now = self.queue[0].finish
                while self.queue and self.queue[0].finish == self.now:
                    run = heapq.heappop(self.queue)
                    self.core.took(run.result, EPOCH + timedelta(seconds=self.now))
        return self.result(None)

    def submit(self, submit: Submit) -> None:
        self.step_ids += 1
        commit = self.candidates[submit.position]
        started = EPOCH + timedelta(seconds=self.now)
        step = StepRecord(
            id=self.step_ids, bisect_id=0, sha=commit.sha, attempt=1, worker=submit.worker, node="sim", gpus=(),
            started=started, finished=None, build_s=None, run_s=None, exit_code=None, verdict=None, samples=(),
            log_path="", error_kind=None, detail="", purpose=submit.purpose,
        )  # fmt: skip
        self.core.started(step, submit)
        self.confirm_runs += submit.purpose is StepPurpose.CONFIRM
        self.reference_runs += submit.purpose is StepPurpose.REFERENCE
        result = self.test(step.id, commit, submit.worker)
        heapq.heappush(self.queue, _Run(self.now + 1, self.world.rng.random(), step.id, submit.worker, result))

    def test(self, step_id: int, commit: Commit, worker: str) -> StepResult:
        if commit.position in self.history.skips:
            self.world.runs += 1
            return StepResult(step_id, commit.sha, Verdict.SKIP, detail="simulated skip")
        value = self.world.run(commit.position)
        passed = self.history.expectation.is_met(value)
        fault = self.faults.get(worker)
        if fault is WorkerFault.FAILS or fault is WorkerFault.PASSES:
            passed = fault is WorkerFault.PASSES
        elif fault is WorkerFault.INVERTS:
            passed = not passed
        elif fault is WorkerFault.MOSTLY_FAILS and self.world.rng.random() < MOSTLY_FAILS_RATE:
            passed = False
        samples = (value,) if self.history.noise_sigma is not None else ()
        return StepResult(step_id, commit.sha, Verdict.GOOD if passed else Verdict.BAD, samples=samples)

    def cancel(self, step_id: int) -> None:
        run = next((r for r in self.queue if r.step_id == step_id), None)
        if run is not None:
            self.queue.remove(run)
            heapq.heapify(self.queue)
            cancelled = StepResult(step_id, run.result.sha, Verdict.CANCELLED)
            self.core.took(cancelled, EPOCH + timedelta(seconds=self.now))

    def result(self, finish: Finish | None) -> SimResult:
        """The bisect's result; finish None: max_runs spent."""
        status = SimStatus.BUDGET if finish is None else STATUSES.get(finish.status, SimStatus.FAILED)
        lo = int(finish.last_good, 16) if finish and finish.last_good else None
        hi = int(finish.first_bad, 16) if finish and finish.first_bad else None
        named = status in (SimStatus.FOUND, SimStatus.AMBIGUOUS)
        correct = named and lo is not None and hi is not None and lo < self.history.culprit <= hi
        confirmation = self.core.records.confirmation
        confidence = confirmation.confidence if confirmation is not None and finish else None
        quarantined = tuple(sorted(self.core.ledger.quarantined))
        return SimResult(
            status, lo, hi, correct, self.world.runs, self.confirm_runs, self.now, confidence, self.reference_runs,
            quarantined,
        )  # fmt: skip


def _spec(history: History, options: ProductOptions, slots: int) -> BisectSpec:
    measured = history.noise_sigma is not None
    return BisectSpec.from_options({
        "repo": "simulated", "good": "0", "bad": str(history.size - 1), "run": "simulated", "workers": slots,
        "find_fix": history.find_fix, "strategy": options.strategy, "repeat": options.repeat,
        "max_repeat": options.max_repeat, "confirm": options.confirm, "verify_endpoints": options.verify_endpoints,
        "explain": False, "metric": r"metric: (\S+)" if measured else None,
        "expect": (options.expect or str(history.expectation)) if measured else None,
        "direction": history.direction.value if options.expect == "auto" else None,
        "noise_band": float(options.noise_band),
    })  # fmt: skip
