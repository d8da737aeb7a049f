"""What the coordinator tells whoever watches a bisect. The CLI renders it live with rich."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bisector.vocab.domain import BisectRecord, Commit, StepResult
from bisector.workers.executor import Assignment


@dataclass(frozen=True)
class Progress:
    candidates: int  # commits in the range, endpoints included
    suspects: int  # commits that could still be the first bad one
    running: int
    done: int  # finished steps, every verdict
    estimated_left: int  # steps still expected, by the strategy's estimate
    last_good: Commit
    first_bad: Commit
    building_ahead: tuple[Commit, ...] = ()  # commits whose images are being built ahead of their steps


class ProgressObserver(Protocol):
    def step_started(self, step_id: int, commit: Commit, attempt: int, assignment: Assignment) -> None: ...

    def step_finished(self, result: StepResult, commit: Commit, word: str) -> None:
        """word: the verdict in the bisect's terms (--term-old/--term-new, broken/fixed with --find-fix)."""

    def progress(self, progress: Progress) -> None: ...

    def note(self, message: str) -> None: ...

    def finished(self, record: BisectRecord) -> None: ...


class SilentObserver:
    def step_started(self, step_id: int, commit: Commit, attempt: int, assignment: Assignment) -> None:
        pass

    def step_finished(self, result: StepResult, commit: Commit, word: str) -> None:
        pass

    def progress(self, progress: Progress) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def finished(self, record: BisectRecord) -> None:
        pass
