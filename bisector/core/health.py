"""Worker health: when two workers disagree on a commit, each re-runs the endpoints (known good and bad); a
worker that answers most of them wrong is quarantined and its results stop counting."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bisector.core.ledger import Ledger
from bisector.vocab.domain import ErrorKind, StepPurpose, StepRecord, Verdict

REFERENCE_RUNS = 3  # runs of each endpoint on a suspect worker, at least
DECIDED = (Verdict.GOOD, Verdict.BAD)  # the answers a reference run can give


@dataclass(frozen=True)
class ReferenceCheck:
    worker: str
    position: int
    expected: Verdict  # what a healthy worker answers there


class Health:
    def __init__(self, ledger: Ledger, checked: Sequence[str]) -> None:
        self.ledger = ledger
        self.checked: set[str] = set(checked)  # workers whose reference runs were asked
        self.queue: list[ReferenceCheck] = []
        self.in_flight: dict[int, ReferenceCheck] = {}  # step id -> its check
        self.answers: dict[str, list[bool]] = defaultdict(list)  # worker -> right/wrong per run

    def endpoints(self) -> tuple[tuple[int, Verdict], tuple[int, Verdict]]:
        """The known commits a reference check runs, each with the verdict a healthy worker gives it."""
        good, bad = 0, self.ledger.bad_position
        if self.ledger.spec.search.find_fix:
            return (good, Verdict.BAD), (bad, Verdict.GOOD)
        return (good, Verdict.GOOD), (bad, Verdict.BAD)

    def runs(self) -> int:
        # Several runs per endpoint: one unlucky run of a flaky test must not quarantine a healthy worker.
        return max(self.ledger.spec.search.repeat, REFERENCE_RUNS)

    def restore(self, stored: Sequence[StepRecord]) -> list[tuple[str, str]]:
        """On resume: the answers stored for each worker under check, and the runs it still owes (those that
        never finished or were interrupted run again). Returns the workers to quarantine, with the reason."""
        out = []
        for worker in sorted(self.checked - set(self.ledger.quarantined)):
            own = [
                s for s in stored
                if s.purpose is StepPurpose.REFERENCE and s.worker == worker and s.verdict is not None
                and s.error_kind is not ErrorKind.INTERRUPTED
            ]  # fmt: skip
            for position, expected in self.endpoints():
                done = [s for s in own if self.ledger.position.get(s.sha) == position]
                self.answers[worker] += [s.verdict is expected for s in done if s.verdict in DECIDED]
                self.queue += [ReferenceCheck(worker, position, expected)] * max(0, self.runs() - len(done))
            if reason := self.verdict(worker):
                out.append((worker, reason))
        return out

    def disagreement(self, position: int) -> list[str]:
        """Two workers with opposite verdicts on one commit: queue endpoint runs on each. Returns the workers
        newly put under check."""
        by_worker: dict[str, set[Verdict]] = defaultdict(set)
        history = self.ledger.histories.get(position)
        for step in history.steps if history else []:
            if step.worker and step.worker not in self.ledger.quarantined and step.verdict in DECIDED:
                by_worker[step.worker].add(step.verdict)
        says = {worker: next(iter(v)) for worker, v in by_worker.items() if len(v) == 1}
        if len(set(says.values())) < 2:
            return []
        added = []
        for worker in sorted(says):
            if worker in self.checked:
                continue
            self.checked.add(worker)
            (good, good_expect), (bad, bad_expect) = self.endpoints()
            pair = [ReferenceCheck(worker, good, good_expect), ReferenceCheck(worker, bad, bad_expect)]
            self.queue += pair * self.runs()
            added.append(worker)
        return added

    def next_check(self, worker: str) -> ReferenceCheck | None:
        """The next reference run this (free) worker owes, taken off the queue."""
        check = next((c for c in self.queue if c.worker == worker), None)
        if check is not None:
            self.queue.remove(check)
        return check

    def result(self, step_id: int, verdict: Verdict) -> str | None:
        """A reference run came back; the reason to quarantine its worker once all its runs are back."""
        check = self.in_flight.pop(step_id)
        if verdict in DECIDED:
            self.answers[check.worker].append(verdict is check.expected)
        return self.verdict(check.worker)

    def verdict(self, worker: str) -> str | None:
        pending = any(c.worker == worker for c in [*self.queue, *self.in_flight.values()])
        answers = self.answers[worker]
        if pending or worker in self.ledger.quarantined or not answers or sum(answers) * 2 > len(answers):
            return None
        return (
            f"reference check: {len(answers) - sum(answers)} of {len(answers)} runs of the endpoints "
            f"(known good and bad) answered wrong on {worker}"
        )
