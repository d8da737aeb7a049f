"""What a step cost in GPU time: the one rule the report, `bisect stats` and the dashboard share."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bisector.vocab.domain import StepRecord

MAX_STEP_S = 1e9  # a step's time counts up to this: a broken clock cannot overflow a sum of many steps


def gpu_seconds(gpus: Sequence[int], started: datetime, finished: datetime | None) -> float:
    """The time the step held its GPUs (finished - started, clamped to [0, MAX_STEP_S]) x how many it held.
    A CPU-only step (no GPUs) or one still running costs 0."""
    if finished is None or not gpus:
        return 0.0
    held_s = min(max((finished - started).total_seconds(), 0.0), MAX_STEP_S)
    return held_s * len(gpus)


def step_gpu_seconds(step: StepRecord) -> float:
    return gpu_seconds(step.gpus, step.started, step.finished)
