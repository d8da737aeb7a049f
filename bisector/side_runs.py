"""Steps outside the search: traced re-runs, minimisation variants, confirmation and reference runs.

They go through the same executor and are stored like search steps (with their purpose), so their GPU
time is counted and their logs kept; they never narrow the search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from bisector.domain import StepPurpose, StepResult
from bisector.metric import MetricSpec
from bisector.paths import log_dir
from bisector.progress import ProgressObserver
from bisector.spec import BisectSpec
from db.store import Store
from workers.executor import Executor, StepRequest

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
        self.repo = store.get_bisect(bisect_id).repo

    def run(self, runs: Sequence[SideRun]) -> list[StepResult]:
        """The results in the order of runs; each run is one attempt (errors are returned, not retried)."""
        pending = list(enumerate(runs))
        in_flight: dict[int, int] = {}  # step id -> index in runs
        results: dict[int, StepResult] = {}
        while pending or in_flight:
            while pending and self.executor.free_slots() > 0:
                index, side_run = pending.pop(0)
                in_flight[self._submit(side_run)] = index
            for result in self.executor.poll(POLL_INTERVAL_S):
                index = in_flight.pop(result.step_id)
                self.store.finish_step(result.step_id, result, self.now())
                results[index] = result
                self.observer.note(
                    f"{runs[index].purpose.value} run at {result.sha[:12]}: {result.verdict.value}"
                    + (f" (metric {result.samples[-1]:.4g})" if result.samples else "")
                )
        return [results[i] for i in range(len(runs))]

    def _submit(self, side_run: SideRun) -> int:
        attempt = 1
        step_id = self.store.start_step(
            self.bisect_id, side_run.sha, attempt, "", "", (), self.now(), purpose=side_run.purpose
        )
        label = f"-{side_run.label}" if side_run.label else ""
        request = StepRequest(
            step_id=step_id,
            bisect_id=self.bisect_id,
            sha=side_run.sha,
            attempt=attempt,
            repo=self.repo,
            run_cmd=self.spec.run,
            build_cmd=self.spec.build,
            metric=self.metric,
            log_path=str(log_dir(self.bisect_id) / f"step-{step_id}-{side_run.purpose.value}{label}.log"),
            timeout_s=self.spec.timeout_s,
            env={**self.spec.env, **side_run.env},
        )
        assignment = self.executor.submit(request)
        self.store.assign_step(step_id, assignment.worker, assignment.node, assignment.gpus)
        return step_id
