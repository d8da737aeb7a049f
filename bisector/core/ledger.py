"""The ledger of one bisect: the runs of each commit, the steps in flight, the quarantined workers, and the
one place a commit's verdict is decided (used by the search, the report and the dashboard alike).

A commit's verdict: what its trusted runs say (bisector/core/judge.py: repeats, statistics, a person's
mark), an endpoint judged by its role (bisector/core/endpoints.py), and a commit whose runs all failed
`max_attempts` times counted as untestable (a skip, never bad). Failures of the harness (the coordinator's
death, a broken slot, a full disk, a step never reported) count against neither the commit nor its worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from bisector.core.endpoints import endpoint_verdict
from bisector.core.judge import RESULT_VERDICTS, UNTESTED, CommitView, Judge, run_samples
from bisector.core.spec import BisectSpec
from bisector.vocab.commit_range import CommitRange
from bisector.vocab.domain import Commit, ErrorKind, StepPurpose, StepRecord, StepResult, Verdict

# Steps whose verdicts decide commits; a manual step is a person's verdict, counted with the search.
EVIDENCE_PURPOSES = (StepPurpose.SEARCH, StepPurpose.CONFIRM, StepPurpose.MANUAL)
HARNESS_KINDS = frozenset({ErrorKind.INTERRUPTED, ErrorKind.HARNESS, ErrorKind.DISK_FULL, ErrorKind.STALLED})


@dataclass
class CommitHistory:
    """The evidence steps of one commit, running ones included."""

    steps: list[StepRecord] = field(default_factory=list)

    def trusted(self, quarantined: Mapping[str, str]) -> list[StepRecord]:
        return [s for s in self.steps if s.worker not in quarantined]

    def results(self, quarantined: Mapping[str, str]) -> int:
        return sum(1 for s in self.trusted(quarantined) if s.verdict in RESULT_VERDICTS or s.verdict is Verdict.SKIP)

    def failures(self, quarantined: Mapping[str, str]) -> list[StepRecord]:
        return [
            s for s in self.trusted(quarantined) if s.verdict is Verdict.ERROR and s.error_kind not in HARNESS_KINDS
        ]

    def failed_workers(self, quarantined: Mapping[str, str]) -> frozenset[str]:
        return frozenset(s.worker for s in self.failures(quarantined) if s.worker)


@dataclass(frozen=True)
class InFlight:
    position: int
    purpose: StepPurpose
    worker: str


class Ledger:
    """Positions index `candidates`; the good endpoint is position 0, the bad one `bad_position`."""

    def __init__(
        self,
        spec: BisectSpec,
        candidates: CommitRange | Sequence[Commit],
        bad_sha: str,
        steps: Iterable[StepRecord] = (),
        quarantined: Mapping[str, str] | None = None,
        *,
        noisy: bool = False,
    ) -> None:
        self.spec = spec
        self.judge = Judge(spec)
        self.candidates = candidates if isinstance(candidates, CommitRange) else CommitRange.of(candidates)
        self.position = self.candidates.position  # SHA -> position
        self.bad_sha = bad_sha
        self.histories: dict[int, CommitHistory] = {}
        self.in_flight: dict[int, InFlight] = {}  # step id -> where it runs
        self.quarantined: dict[str, str] = dict(quarantined or {})
        self.noisy = noisy  # endpoints are judged with noise in mind (bisector/core/endpoints.py)
        self._views: dict[int, tuple[Verdict | None, CommitView]] = {}
        for step in steps:
            if step.purpose in EVIDENCE_PURPOSES and step.sha in self.position:
                self.history(self.position[step.sha]).steps.append(step)

    @property
    def bad_position(self) -> int:
        return self.position.get(self.bad_sha, -1)

    def extend(self, commits: Sequence[Commit]) -> None:
        """More candidates (a merged branch's commits, numbered after the others)."""
        self.candidates.extend(c.sha for c in commits)
        self.candidates.describe(commits)

    def history(self, position: int) -> CommitHistory:
        return self.histories.setdefault(position, CommitHistory())

    def tested(self) -> list[int]:
        return list(self.histories)

    # --- changes -----------------------------------------------------------------------------------------------

    def add_manual(self, step: StepRecord) -> bool:
        """A person's verdict stored while the search runs; whether it is about a candidate."""
        if step.sha not in self.position:
            return False
        self.history(self.position[step.sha]).steps.append(step)
        self.forget()
        return True

    def started(self, step: StepRecord, position: int) -> None:
        """A step was sent. Reference runs check a worker, not the commit: they stay out of its history."""
        self.in_flight[step.id] = InFlight(position, step.purpose, step.worker)
        if step.purpose is not StepPurpose.REFERENCE:
            self.history(position).steps.append(step)
        self.forget(position)

    def finished(self, result: StepResult, finished: datetime) -> InFlight:
        flight = self.in_flight.pop(result.step_id)
        steps = self.history(flight.position).steps if flight.position in self.histories else []
        steps[:] = [_finished_step(s, result, finished) if s.id == result.step_id else s for s in steps]
        self.forget()  # an endpoint's samples feed every other commit's view in comparative mode
        return flight

    def quarantine(self, worker: str, reason: str) -> None:
        self.quarantined[worker] = reason
        self.forget()

    def set_noisy(self, noisy: bool) -> None:
        if noisy != self.noisy:
            self.noisy = noisy
            self.forget()

    def forget(self, position: int | None = None) -> None:
        if position is None:
            self._views.clear()
        else:
            self._views.pop(position, None)

    # --- the verdict -------------------------------------------------------------------------------------------

    def role(self, position: int) -> Verdict | None:
        return {0: Verdict.GOOD, self.bad_position: Verdict.BAD}.get(position)

    def _judged(self, position: int) -> tuple[Verdict | None, CommitView]:
        if position not in self._views:
            history = self.histories.get(position)
            if history is None:
                return None, UNTESTED
            runs = history.trusted(self.quarantined)
            role = self.role(position)
            if role is None:
                samples = (self.view(0).samples, self.view(self.bad_position).samples)
                view = self.judge.view(runs, endpoint_samples=samples)
                verdict = view.verdict
            else:
                view = self.judge.view(runs, endpoint=role, endpoint_samples=self._endpoint_samples())
                verdict, more = endpoint_verdict(view, role, noisy=self.noisy)
                view = replace(view, more_runs=more)
            failed = len(history.failures(self.quarantined))
            if verdict is None and not history.results(self.quarantined) and failed >= self.spec.search.max_attempts:
                verdict = Verdict.SKIP  # untestable after its retries: excluded, neighbours tried
            self._views[position] = (verdict, view)
        return self._views[position]

    def _endpoint_samples(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The endpoints' samples from their trusted runs (not from their views, each of which reads both)."""
        histories = (self.histories.get(p) for p in (0, self.bad_position))
        good, bad = (run_samples(h.trusted(self.quarantined)) if h else () for h in histories)
        return good, bad

    def view(self, position: int) -> CommitView:
        """What the commit's trusted runs say (observations, samples, more runs wanted)."""
        return self._judged(position)[1]

    def verdict(self, position: int) -> Verdict | None:
        """The commit's verdict for the search: GOOD, BAD or SKIP; None while undecided."""
        return self._judged(position)[0]

    def verdict_of(self, sha: str) -> Verdict | None:
        position = self.position.get(sha)
        return None if position is None else self.verdict(position)

    def running(self, position: int) -> int:
        return sum(1 for f in self.in_flight.values() if f.position == position)

    def needs_retry(self, position: int) -> bool:
        history = self.histories.get(position)
        if history is None or history.results(self.quarantined):
            return False
        return 0 < len(history.failures(self.quarantined)) < self.spec.search.max_attempts

    def more_wanted(self, position: int) -> int:
        """Runs the commit still needs (repeats, adaptive repeats, a doubted endpoint) beyond those in flight."""
        return max(self.view(position).more_runs - self.running(position), 0)

    def failed_workers(self, position: int) -> frozenset[str]:
        history = self.histories.get(position)
        return history.failed_workers(self.quarantined) if history else frozenset()

    def workers_of(self, position: int) -> frozenset[str]:
        """The workers the commit's evidence steps ran on (or run on), quarantined ones included."""
        history = self.histories.get(position)
        return frozenset(s.worker for s in history.steps if s.worker) if history else frozenset()

    def attempts(self, position: int) -> int:
        history = self.histories.get(position)
        return len(history.steps) if history else 0

    def last_detail(self, position: int) -> str:
        history = self.histories.get(position)
        steps = history.steps if history else []
        return steps[-1].detail.splitlines()[0] if steps and steps[-1].detail else "no detail"

    def decisions(self) -> dict[str, dict[str, object]]:
        """The statistical decisions behind the verdicts, per commit."""
        return {
            self.candidates[p].sha: view.decision
            for p in self.histories
            if (view := self.view(p)).decision is not None and p < len(self.candidates)
        }

    def done(self) -> int:
        return sum(1 for h in self.histories.values() for s in h.steps if s.verdict is not None)


def _finished_step(step: StepRecord, result: StepResult, finished: datetime) -> StepRecord:
    return replace(
        step, finished=finished, build_s=result.build_s, run_s=result.run_s, exit_code=result.exit_code,
        verdict=result.verdict, samples=result.samples, log_path=result.log_path, error_kind=result.error_kind,
        detail=result.detail, worker=result.worker or step.worker, node=result.node or step.node,
        gpus=result.gpus or step.gpus,
    )  # fmt: skip
