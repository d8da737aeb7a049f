"""The one step pipeline, for search steps and side runs alike (trace, minimize, confirm, reference, rerun):
a batch of placed steps is recorded in one transaction, then its requests go out; results are buffered and
written in one transaction, always before any conclusion drawn from them; a step recorded but never sent,
or still running when the coordinator stops, is stored as interrupted (`bisect resume` runs it again)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from bisector.core.spec import BisectSpec
from bisector.db.store import INTERRUPTED_DETAIL, NewStep, Store
from bisector.vocab.domain import CANCELLED_DETAIL, NEVER_SENT, ErrorKind, StepPurpose, StepRecord, StepResult, Verdict
from bisector.vocab.images import container_reference
from bisector.vocab.metric import MetricSpec
from bisector.vocab.paths import log_dir
from bisector.workers.executor import Assignment, Executor, StepRequest
from bisector.workers.images.key import container_recipe
from bisector.workers.pool import PREEMPTED


def step_request(
    spec: BisectSpec,
    *,
    bisect_id: int,
    step_id: int,
    sha: str,
    attempt: int,
    repo: str,
    metric: MetricSpec,
    log_path: str,
    env: dict[str, str] | None = None,
    avoid_workers: frozenset[str] = frozenset(),
    pin_worker: str = "",
    preemptible: bool = False,
) -> StepRequest:
    """What a worker needs to run the spec's build and test at sha: search steps and side runs alike.
    env is added to the spec's env; preemptible: a search run (workers/pool.py may cancel it)."""
    image = spec.executor.image_recipe(spec.test.patches, spec.test.env)
    return StepRequest(
        step_id=step_id,
        bisect_id=bisect_id,
        sha=sha,
        attempt=attempt,
        repo=repo,
        run_cmd=spec.test.run,
        build_cmd=spec.test.build,
        metric=metric,
        log_path=log_path,
        timeout_s=spec.test.timeout_s,
        env={**spec.test.env, **(env or {})},
        avoid_workers=avoid_workers,
        pin_worker=pin_worker,
        image=image,
        patches=() if image else spec.test.patches,
        preemptible=preemptible,
        container=container_reference(spec.executor.image_template, sha),
        container_recipe=container_recipe(spec.test.build, spec.test.patches, spec.test.env),
        no_gpu=spec.executor.gpus_per_step == 0,
    )


@dataclass(frozen=True)
class PlannedStep:
    """One run, placed: the worker is always chosen by the caller (the pipeline never places)."""

    sha: str
    purpose: StepPurpose
    worker: str
    attempt: int = 1
    env: dict[str, str] = field(default_factory=dict)  # added to the spec's env
    label: str | None = None  # side runs: named in the log file (None: the log is named by the commit)
    avoid: frozenset[str] = frozenset()  # workers that failed this commit
    preemptible: bool = False  # a search run: a shared pool may cancel it (it comes back CANCELLED)


@dataclass(frozen=True)
class Sent:
    step: StepRecord  # the running step as stored
    assignment: Assignment


class StepPipeline:
    def __init__(
        self,
        store: Store,
        executor: Executor,
        bisect_id: int,
        repo: str,
        spec: BisectSpec,
        now: Callable[[], datetime],
        *,
        metric: MetricSpec | None = None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.bisect_id = bisect_id
        self.repo = repo
        self.spec = spec
        self.now = now
        self.metric = metric or spec.metric_spec()
        self.log_dir = log_dir(store.identity, bisect_id)
        self.running: dict[int, StepRecord] = {}  # step id -> the step as sent
        self.unwritten: list[tuple[StepResult, datetime]] = []  # results taken in, not yet stored
        self.cancel_why: dict[int, str] = {}  # running step id -> why the coordinator stopped it

    def send(self, planned: Sequence[PlannedStep]) -> list[Sent]:
        """Record the steps (one transaction), then send each to its worker."""
        if not planned:
            return []
        started = self.now()
        new = [NewStep(p.sha, p.attempt, p.worker, started, p.purpose) for p in planned]
        step_ids = self.store.start_steps(self.bisect_id, new)
        out: list[Sent] = []
        try:
            for step_id, plan in zip(step_ids, planned, strict=True):
                out.append(self._send(step_id, plan, started))
        except BaseException as exc:
            unsent = [(i, p) for i, p in zip(step_ids[len(out) :], planned[len(out) :], strict=True)]
            self._interrupt([(i, p.sha, "") for i, p in unsent], f"{NEVER_SENT}: {exc}".strip())
            raise
        self.store.place_steps([(s.step.id, s.step.node, s.step.gpus) for s in out if s.step.gpus or s.step.node])
        return out

    def _send(self, step_id: int, plan: PlannedStep, started: datetime) -> Sent:
        if plan.label is None:
            name = f"step-{step_id}-{plan.sha[:12]}.log"
        else:
            name = f"step-{step_id}-{plan.purpose.value}{'-' + plan.label if plan.label else ''}.log"
        request = step_request(
            self.spec,
            bisect_id=self.bisect_id, step_id=step_id, sha=plan.sha, attempt=plan.attempt, repo=self.repo,
            metric=self.metric, log_path=str(self.log_dir / name), env=plan.env, avoid_workers=plan.avoid,
            pin_worker=plan.worker, preemptible=plan.preemptible,
        )  # fmt: skip
        assignment = self.executor.submit(request)  # where it ran (node, GPUs) comes back with the result
        step = StepRecord(
            id=step_id, bisect_id=self.bisect_id, sha=plan.sha, attempt=plan.attempt, worker=assignment.worker,
            node=assignment.node, gpus=assignment.gpus, started=started, finished=None, build_s=None, run_s=None,
            exit_code=None, verdict=None, samples=(), log_path=request.log_path, error_kind=None, detail="",
            purpose=plan.purpose,
        )  # fmt: skip
        self.running[step_id] = step
        return Sent(step, assignment)

    def prefer_workers(self, sha: str, workers: Sequence[str]) -> list[str]:
        """workers ordered best first by the executor for a search step at sha (e.g. those holding its image)."""
        return self.executor.prefer_workers(self.search_request(sha), workers)

    def build_ahead_request(self, sha: str) -> StepRequest:
        """The request a search step at sha would send, for building its image ahead (logged beside the steps)."""
        return self.search_request(sha, str(self.log_dir / f"build-ahead-{sha[:12]}.log"))

    def search_request(self, sha: str, log_path: str = "") -> StepRequest:
        """What a search step at sha would be sent, before it has a step id."""
        return step_request(
            self.spec,
            bisect_id=self.bisect_id, step_id=0, sha=sha, attempt=1, repo=self.repo, metric=self.metric,
            log_path=log_path,
        )  # fmt: skip

    def poll(self, timeout_s: float) -> list[StepResult]:
        """Results of this pipeline's running steps that came back within timeout_s (buffered for writing)."""
        return [self.took(r) for r in self.executor.poll(timeout_s) if r.step_id in self.running]

    def cancel(self, step_id: int, why: str) -> None:
        """Stop a running step; its result comes back CANCELLED, stored with why (a worker only knows it was)."""
        self.cancel_why.setdefault(step_id, why)  # the first reason stands (a later cancel_all finds it stopped)
        self.executor.cancel(step_id)

    def took(self, result: StepResult) -> StepResult:
        """A result taken in (from the executor, or made up: a stalled step). Written by the next flush."""
        self.running.pop(result.step_id)
        why = self.cancel_why.pop(result.step_id, None)
        if why and result.verdict is Verdict.CANCELLED and not result.detail.startswith(PREEMPTED):
            detail = why if result.detail in ("", CANCELLED_DETAIL) else f"{why} ({result.detail})"
            result = dataclasses.replace(result, detail=detail)
        self.unwritten.append((result, self.now()))
        return result

    def finished_at(self, step_id: int) -> datetime:
        return next(finished for result, finished in reversed(self.unwritten) if result.step_id == step_id)

    def flush(self) -> list[StepResult]:
        """Store the results taken in since the last flush, in one transaction; returns them."""
        if not self.unwritten:
            return []
        taken, self.unwritten = self.unwritten, []
        try:
            self.store.finish_steps([(result.step_id, result, finished) for result, finished in taken])
        except BaseException:
            self.unwritten = taken + self.unwritten  # not written: a later flush tries again
            raise
        return [result for result, _ in taken]

    def interrupt_running(self) -> None:
        """The coordinator stops (a signal, a lost store, an executor failure): its steps do not stay running."""
        self._interrupt([(i, s.sha, s.log_path) for i, s in self.running.items()], INTERRUPTED_DETAIL)

    def _interrupt(self, steps: Sequence[tuple[int, str, str]], detail: str) -> None:
        stopped = [
            (
                i,
                StepResult(i, sha, Verdict.ERROR, error_kind=ErrorKind.INTERRUPTED, detail=detail, log_path=log),
                self.now(),
            )
            for i, sha, log in steps
        ]
        with contextlib.suppress(Exception):  # the original error is the one to see
            self.store.finish_steps(stopped)
