"""What the coordinator tells whoever watches a bisect. The CLI renders it live with rich."""

from __future__ import annotations

from typing import Protocol

from bisector.core.progress import Progress
from bisector.vocab.domain import BisectRecord, Commit, StepResult
from bisector.workers.executor import Assignment


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
