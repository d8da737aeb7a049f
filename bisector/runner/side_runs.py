"""Steps outside the search: traced re-runs, minimisation variants, reruns.

They go through the search's step pipeline (bisector/runner/pipeline.py) and are stored like search steps
(with their purpose), so their GPU time is counted and their logs kept; they never narrow the search.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from bisector.core.records import SearchRecords
from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.runner.observer import ProgressObserver
from bisector.runner.pipeline import PlannedStep, StepPipeline
from bisector.vocab.domain import SideRun, StepResult, Verdict
from bisector.vocab.errors import ExecutorError, StateError
from bisector.vocab.metric import MetricSpec
from bisector.workers.executor import Executor

POLL_INTERVAL_S = 0.5
CANCELLED_WHY = "cancelled by the operator"


class SideRunsCancelledError(StateError):
    """The batch was cancelled: its running steps were stored as cancelled, the others never sent. The message
    names the batch's purpose and commits, and how many steps were stopped."""


class SideRunner:
    """Runs a batch of side runs on the executor's free slots and waits for all of them (explain.py's CommitRuns)."""

    def __init__(
        self,
        store: Store,
        executor: Executor,
        bisect_id: int,
        spec: BisectSpec,
        now: Callable[[], datetime],
        observer: ProgressObserver,
        *,
        metric: MetricSpec | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        """cancelled: asked every round; once true, the batch stops (SideRunsCancelledError)."""
        self.executor = executor
        self.cancelled = cancelled
        self.spec = spec
        self.observer = observer
        record = store.get_bisect(bisect_id)
        self.pipeline = StepPipeline(store, executor, bisect_id, record.repo, spec, now, metric=metric)
        self.quarantined = frozenset(SearchRecords.from_extra(record.extra).quarantined)

    @property
    def slots(self) -> int:
        return self.executor.slots

    def run(self, runs: Sequence[SideRun]) -> list[StepResult]:
        """The results in the order of runs. A run that ends in an error (infrastructure, never the commit's
        fault) is retried on another worker up to the spec's max_attempts, each attempt stored; its result is
        the last attempt's. Workers the search quarantined are not used. SideRunsCancelledError once cancelled()."""
        try:
            return self._run(runs, [_Attempt(index) for index in range(len(runs))])
        except BaseException:  # a stop signal, a lost store, an executor failure: its steps do not stay running
            self.pipeline.interrupt_running()
            raise

    def _run(self, runs: Sequence[SideRun], pending: list[_Attempt]) -> list[StepResult]:
        results: dict[int, StepResult] = {}
        in_flight: dict[int, _Attempt] = {}  # step id -> the attempt it runs
        while pending or in_flight:
            if self.cancelled():
                self._stop(runs, in_flight)
            while pending and (worker := self._worker_for(pending[0])):
                attempt = pending.pop(0)
                run = runs[attempt.index]
                plan = PlannedStep(run.sha, run.purpose, worker, attempt.number, run.env, run.label)
                in_flight[self.pipeline.send([plan])[0].step.id] = attempt
            if not in_flight:  # nothing running and no usable worker free: slots are (re)starting
                time.sleep(POLL_INTERVAL_S)
                continue
            for result in self.pipeline.poll(POLL_INTERVAL_S):
                self.pipeline.flush()
                attempt = in_flight.pop(result.step_id)
                side_run = runs[attempt.index]
                if result.verdict is Verdict.ERROR and attempt.number < self.spec.search.max_attempts:
                    pending.append(attempt.retry(result.worker))
                    self.observer.note(
                        f"{side_run.purpose.value} run at {result.sha[:12]} failed on {result.worker or 'a worker'} "
                        f"({result.error_kind or 'error'}); retrying elsewhere"
                    )
                    continue
                results[attempt.index] = result
                self.observer.note(
                    f"{side_run.purpose.value} run at {result.sha[:12]}: {result.verdict.value}"
                    + (f" (metric {result.samples[-1]:.4g})" if result.samples else "")
                )
        return [results[i] for i in range(len(runs))]

    def _stop(self, runs: Sequence[SideRun], in_flight: dict[int, _Attempt]) -> None:
        """Cancel the running steps, store their CANCELLED results, and raise SideRunsCancelledError."""
        for step_id in in_flight:
            self.pipeline.cancel(step_id, CANCELLED_WHY)
        stopped = 0  # a step may have ended on its own meanwhile: its result is stored as it came
        while self.pipeline.running:
            stopped += sum(r.verdict is Verdict.CANCELLED for r in self.pipeline.poll(POLL_INTERVAL_S))
        self.pipeline.flush()
        purposes = "/".join(dict.fromkeys(run.purpose.value for run in runs))
        commits = ", ".join(dict.fromkeys(run.sha[:12] for run in runs))
        raise SideRunsCancelledError(
            f"the {purposes} at {commits} was cancelled; {stopped} running step(s) stopped and stored as cancelled"
        )

    def _worker_for(self, attempt: _Attempt) -> str:
        """A free worker for this attempt, one that has not failed this run when there is one; "" if none is
        free. Raises ExecutorError when every worker is quarantined."""
        names = self.executor.worker_names()
        if names and set(names) <= self.quarantined:
            raise ExecutorError(
                f"every worker is quarantined ({', '.join(sorted(self.quarantined))}): the bisect's search found "
                "them giving wrong answers on known commits; run on other workers (--workers, --executor)"
            )
        usable = [w for w in self.executor.free_workers() if w not in self.quarantined]
        return next((w for w in usable if w not in attempt.failed_on), usable[0] if usable else "")


@dataclass(frozen=True)
class _Attempt:
    index: int  # into the batch of runs
    number: int = 1
    failed_on: frozenset[str] = frozenset()

    def retry(self, worker: str) -> _Attempt:
        return _Attempt(self.index, self.number + 1, self.failed_on | ({worker} if worker else set()))
