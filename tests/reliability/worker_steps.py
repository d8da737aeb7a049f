"""Helpers of the worker reliability tests (imported by name: this directory is on sys.path)."""

from __future__ import annotations

import time
from pathlib import Path

from bisector.domain import StepResult
from bisector.metric import MetricSpec
from bisector.synthetic import SyntheticHistory
from workers.executor import Executor, StepRequest

SAFETY_TIMEOUT_S = 300.0  # only against a hang: no test depends on how fast a step runs


def step_request(
    history: SyntheticHistory,
    step_id: int,
    position: int,
    run: str,
    logs: Path,
    *,
    metric: MetricSpec | None = None,
    timeout_s: float = 120.0,
) -> StepRequest:
    return StepRequest(
        step_id=step_id, bisect_id=1, sha=history.shas[position], attempt=1, repo=str(history.path), run_cmd=run,
        metric=metric or MetricSpec(), log_path=str(logs / f"step-{step_id}.log"), timeout_s=timeout_s,
    )  # fmt: skip


def results_of(executor: Executor, count: int) -> list[StepResult]:
    results: list[StepResult] = []
    deadline = time.monotonic() + SAFETY_TIMEOUT_S
    while len(results) < count and time.monotonic() < deadline:
        results += executor.poll(0.5)
    assert len(results) == count, f"only {len(results)} of {count} steps came back"
    return results


def run_one(executor: Executor, request: StepRequest) -> StepResult:
    executor.submit(request)
    (result,) = results_of(executor, 1)
    return result
