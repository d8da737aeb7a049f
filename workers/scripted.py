"""ScriptedExecutor: answers steps from a script instead of running them, for tests of the coordinator's
decisions (as mozregression's tests script verdicts). Nothing runs and nothing waits: a bisect over it takes
milliseconds. Its contract is every executor's: each submitted step is reported exactly once (finished,
cancelled, or lost), except a step scripted to never answer, which is reported once cancelled or abandoned.

A script maps (sha, run index at that sha from 0, worker) to an `Answer`; `table` builds one from lists of
answers per commit (the last one repeats). An answer can also lose its worker (the step ends
`error/worker_lost` and the worker is gone for good) or never come (a hung worker, the watchdog's business).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bisector.vocab.domain import CANCELLED_DETAIL, ErrorKind, StepResult, Verdict
from bisector.workers.executor import Assignment, Executor, StepRequest


@dataclass(frozen=True)
class Answer:
    verdict: Verdict
    samples: tuple[float, ...] = ()
    error_kind: ErrorKind | None = None
    detail: str = ""
    lose_worker: bool = False  # the worker disappears with this step
    never: bool = False  # no result comes until the step is cancelled or abandoned


GOOD = Answer(Verdict.GOOD)
BAD = Answer(Verdict.BAD)
SKIP = Answer(Verdict.SKIP, detail="exit 125")
LOST = Answer(Verdict.ERROR, error_kind=ErrorKind.WORKER_LOST, detail="worker lost", lose_worker=True)
SILENT = Answer(Verdict.ERROR, never=True)

Script = Callable[[str, int, str], Answer]


def table(answers: Mapping[str, Sequence[Answer]], default: Answer | Callable[[str], Answer] = GOOD) -> Script:
    """A script from a table: the answers of each commit's runs in order (the last one repeats)."""

    def script(sha: str, run: int, worker: str) -> Answer:
        listed = answers.get(sha)
        if listed:
            return listed[min(run, len(listed) - 1)]
        return default(sha) if callable(default) else default

    return script


@dataclass(frozen=True)
class Submitted:
    request: StepRequest
    worker: str
    answer: Answer


class ScriptedExecutor(Executor):
    def __init__(self, script: Script, workers: int = 1) -> None:
        self.script = script
        self.names = [f"scripted-{i}" for i in range(workers)]
        self.running: dict[int, Submitted] = {}  # step id -> the step, until reported
        self.done: list[StepResult] = []  # reported by the next poll
        self.runs: Counter[str] = Counter()  # sha -> runs submitted
        self.submitted: list[Submitted] = []  # every step, in order

    @property
    def slots(self) -> int:
        return len(self.names)

    def worker_names(self) -> list[str]:
        return list(self.names)

    def free_workers(self) -> list[str]:
        busy = {s.worker for s in self.running.values()}
        return [w for w in self.names if w not in busy]

    def submit(self, request: StepRequest) -> Assignment:
        free = self.free_workers()
        if request.pin_worker:
            if request.pin_worker not in free:
                raise ValueError(f"{request.pin_worker} is not free")
            worker = request.pin_worker
        else:
            worker = next((w for w in free if w not in request.avoid_workers), free[0])
        answer = self.script(request.sha, self.runs[request.sha], worker)
        self.runs[request.sha] += 1
        submitted = Submitted(request, worker, answer)
        self.running[request.step_id] = submitted
        self.submitted.append(submitted)
        return Assignment(worker, "scripted", ())

    def poll(self, timeout_s: float) -> list[StepResult]:
        for step_id, step in list(self.running.items()):
            if not step.answer.never:
                self._report(step_id, step.answer)
        out, self.done = self.done, []
        return out

    def _report(self, step_id: int, answer: Answer) -> None:
        step = self.running.pop(step_id)
        self.done.append(
            StepResult(step_id, step.request.sha, answer.verdict, samples=answer.samples, error_kind=answer.error_kind,
                       detail=answer.detail, worker=step.worker, node="scripted")
        )  # fmt: skip
        if answer.lose_worker and step.worker in self.names:
            self.names.remove(step.worker)

    def cancel(self, step_id: int) -> None:
        if step_id in self.running:
            self._report(step_id, Answer(Verdict.CANCELLED, detail=CANCELLED_DETAIL))

    def close(self) -> None:
        for step_id in list(self.running):
            self.cancel(step_id)
