"""Steps outside the search: traced re-runs, minimisation variants, confirmation and reference runs.

They go through the same executor and are stored like search steps (with their purpose), so their GPU
time is counted and their logs kept; they never narrow the search.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from bisector.progress import ProgressObserver
from bisector.spec import BisectSpec
from db.store import INTERRUPTED_DETAIL, Store
from vocab.domain import ErrorKind, StepPurpose, StepResult, Verdict
from vocab.errors import BisectError, ExecutorError
from vocab.metric import MetricSpec
from vocab.paths import log_dir
from workers.executor import Executor

POLL_INTERVAL_S = 0.5


@dataclass(frozen=True)
class SideRun:
    sha: str
    purpose: StepPurpose
    env: dict[str, str] = field(default_factory=dict)  # added to the spec's env
    label: str = ""  # shown in the log file name, e.g. "first-bad"


class SideRunner:
    """Runs a batch of side runs on the executor's free slots and waits for all of them."""

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
    ) -> None:
        self.store = store
        self.executor = executor
        self.bisect_id = bisect_id
        self.spec = spec
        self.now = now
        self.observer = observer
        self.metric = metric or spec.metric_spec()
        record = store.get_bisect(bisect_id)
        self.repo = record.repo
        self.quarantined = frozenset(record.extra.get("quarantined", {}))  # type: ignore[call-overload]

    def run(self, runs: Sequence[SideRun]) -> list[StepResult]:
        """The results in the order of runs. A run that ends in an error (infrastructure, never the commit's
        fault) is retried on another worker up to the spec's max_attempts, each attempt stored; its result is
        the last attempt's. Workers the search quarantined are not used."""
        pending = [_Attempt(index) for index in range(len(runs))]
        in_flight: dict[int, _Attempt] = {}  # step id -> the attempt it runs
        try:
            return self._run(runs, pending, in_flight)
        except BaseException:  # a stop signal, a lost store, an executor failure: its steps do not stay running
            stopped = [
                (step_id, StepResult(step_id, runs[attempt.index].sha, Verdict.ERROR,
                                     error_kind=ErrorKind.INTERRUPTED, detail=INTERRUPTED_DETAIL), self.now())
                for step_id, attempt in in_flight.items()
            ]  # fmt: skip
            with contextlib.suppress(BisectError):
                self.store.finish_steps(stopped)
            raise

    def _run(
        self, runs: Sequence[SideRun], pending: list[_Attempt], in_flight: dict[int, _Attempt]
    ) -> list[StepResult]:
        results: dict[int, StepResult] = {}
        while pending or in_flight:
            while pending and (worker := self._worker_for(pending[0])):
                attempt = pending.pop(0)
                in_flight[self._submit(runs[attempt.index], attempt.number, worker)] = attempt
            if not in_flight:  # nothing running and no usable worker free: slots are (re)starting
                time.sleep(POLL_INTERVAL_S)
                continue
            for result in self.executor.poll(POLL_INTERVAL_S):
                attempt = in_flight.pop(result.step_id)
                self.store.finish_step(result.step_id, result, self.now())
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

    def _submit(self, side_run: SideRun, attempt: int, worker: str) -> int:
        step_id = self.store.start_step(
            self.bisect_id, side_run.sha, attempt, worker, "", (), self.now(), purpose=side_run.purpose
        )
        label = f"-{side_run.label}" if side_run.label else ""
        request = self.spec.step_request(
            bisect_id=self.bisect_id,
            step_id=step_id,
            sha=side_run.sha,
            attempt=attempt,
            repo=self.repo,
            metric=self.metric,
            log_path=str(
                log_dir(self.store.identity, self.bisect_id) / f"step-{step_id}-{side_run.purpose.value}{label}.log"
            ),
            env=side_run.env,
            pin_worker=worker,
        )
        self.executor.submit(request)  # where it ran (node, GPUs) comes back with the result
        return step_id


@dataclass(frozen=True)
class _Attempt:
    index: int  # into the batch of runs
    number: int = 1
    failed_on: frozenset[str] = frozenset()

    def retry(self, worker: str) -> _Attempt:
        return _Attempt(self.index, self.number + 1, self.failed_on | ({worker} if worker else set()))
