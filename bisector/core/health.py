"""Worker health: when two workers disagree on a commit, each re-runs the endpoints (known good and bad); a
worker whose answers at one endpoint are wrong too often for the test's flakes is quarantined and its results
stop counting.

Each endpoint is judged on its own, by a sequential test of the worker's answers there. A healthy worker answers
wrong only when the test flakes (at the rate ε the search has learned); a broken one answers wrong at one endpoint
nearly every run (every test failing: the good one; every test passing: the bad one; inverted answers: both; a bad
GPU failing most runs: the good one). The worker is quarantined once its wrong answers at one endpoint outnumber
its right ones there by the margin: the smallest m, at least MIN_MARGIN, with (ε / (1 - ε)) ** m <= ALPHA, about
how often a healthy worker's answers get that far (Wald's test of ε against 1 - ε). An endpoint is cleared once its
right answers outnumber its wrong ones by CLEARED, or after MAX_RUNS runs (a worker as often wrong as right there is
not held against it). Runs go on, the endpoints taking turns, while either is undecided.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import zip_longest

from bisector.core.ledger import Ledger
from bisector.vocab.domain import ErrorKind, StepPurpose, StepRecord, Verdict

ALPHA = 0.001  # per endpoint: how often a healthy worker may be quarantined at the flake rate learned
MIN_MARGIN = 3  # wrong answers beyond right ones that quarantine, whatever the flake rate
CLEARED = 3  # right answers beyond wrong ones that clear an endpoint
MAX_MARGIN = 6  # so a test flaking near half its runs still gets an answer in MAX_RUNS
MAX_RUNS = 16  # runs of one endpoint on one worker (infrastructure errors included)
DECIDED = (Verdict.GOOD, Verdict.BAD)  # the answers a reference run can give


@dataclass(frozen=True)
class ReferenceCheck:
    worker: str
    position: int
    expected: Verdict  # what a healthy worker answers there


def margin(flake_rate: float) -> int:
    """Wrong answers beyond right ones at one endpoint that quarantine a worker, for a test flaking at this rate."""
    if flake_rate <= 0:
        return MIN_MARGIN
    if flake_rate >= 0.5:
        return MAX_MARGIN
    needed = math.log(1 / ALPHA) / math.log((1 - flake_rate) / flake_rate)
    return min(MAX_MARGIN, max(MIN_MARGIN, math.ceil(needed)))


class Health:
    def __init__(self, ledger: Ledger, checked: Sequence[str], flake_rate: Callable[[], float]) -> None:
        """flake_rate: the rate the search has learned so far (0 while nothing contradicts)."""
        self.ledger = ledger
        self.flake_rate = flake_rate
        self.checked: set[str] = set(checked)  # workers whose reference runs were asked
        self.queue: list[ReferenceCheck] = []
        self.in_flight: dict[int, ReferenceCheck] = {}  # step id -> its check
        # (worker, endpoint position) -> per run: right, wrong, or None (no answer: an infrastructure error, a skip)
        self.answers: dict[tuple[str, int], list[bool | None]] = defaultdict(list)

    def endpoints(self) -> tuple[tuple[int, Verdict], tuple[int, Verdict]]:
        """The known commits a reference check runs, each with the verdict a healthy worker gives it."""
        good, bad = 0, self.ledger.bad_position
        if self.ledger.spec.search.find_fix:
            return (good, Verdict.BAD), (bad, Verdict.GOOD)
        return (good, Verdict.GOOD), (bad, Verdict.BAD)

    def restore(self, stored: Sequence[StepRecord]) -> list[tuple[str, str]]:
        """On resume: the answers stored for each worker under check, and the runs it still owes (those that
        never finished or were interrupted run again). Returns the workers to quarantine, with the reason."""
        expected = dict(self.endpoints())
        for step in stored:
            position = self.ledger.position.get(step.sha, -1)
            finished = step.verdict is not None and step.error_kind is not ErrorKind.INTERRUPTED
            if step.purpose is StepPurpose.REFERENCE and step.worker in self.checked and position in expected:
                self.answers[step.worker, position] += [answer(step.verdict, expected[position])] if finished else []
        out = []
        for worker in sorted(self.checked - set(self.ledger.quarantined)):
            if reason := self.judge(worker):
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
        added = [worker for worker in sorted(says) if worker not in self.checked]
        for worker in added:
            self.checked.add(worker)
            self.judge(worker)
        return added

    def next_check(self, worker: str) -> ReferenceCheck | None:
        """The next reference run this (free) worker owes, taken off the queue."""
        check = next((c for c in self.queue if c.worker == worker), None)
        if check is not None:
            self.queue.remove(check)
        return check

    def result(self, step_id: int, verdict: Verdict) -> str | None:
        """A reference run came back; the reason to quarantine its worker once an endpoint shows it broken."""
        check = self.in_flight.pop(step_id)
        self.answers[check.worker, check.position].append(answer(verdict, check.expected))
        return None if check.worker in self.ledger.quarantined else self.judge(check.worker)

    def judge(self, worker: str) -> str | None:
        """The reason to quarantine the worker if one endpoint shows it broken; else queue the runs each endpoint
        still needs (as many as could settle it), the endpoints taking turns."""
        rate = self.flake_rate()
        needed = margin(rate)
        owed: list[list[ReferenceCheck]] = []
        for position, expected in self.endpoints():
            answers = self.answers[worker, position]
            wrong, right = answers.count(False), answers.count(True)
            if wrong - right >= needed:
                self.queue = [c for c in self.queue if c.worker != worker]
                where = self.ledger.spec.search.terms()[0 if position == 0 else 1]
                return (
                    f"reference check: {wrong} of {len(answers)} runs of the known {where} commit on {worker} answered "
                    f"wrong, {wrong - right} more than right; a healthy worker answers wrong only when the test flakes "
                    f"(in about {rate:.0%} of runs so far)"
                )
            check = ReferenceCheck(worker, position, expected)
            undecided = right - wrong < CLEARED and len(answers) < MAX_RUNS
            closest = min(needed - (wrong - right), CLEARED - (right - wrong))
            wanted = min(closest, MAX_RUNS - len(answers)) if undecided else 0
            surplus = list(self.in_flight.values()).count(check) + self.queue.count(check) - wanted
            for _ in range(surplus):  # the last queued first
                del self.queue[len(self.queue) - 1 - self.queue[::-1].index(check)]
            owed.append([check] * -surplus)
        self.queue += [check for pair in zip_longest(*owed) for check in pair if check is not None]
        return None


def answer(verdict: Verdict | None, expected: Verdict) -> bool | None:
    """A reference run's answer: right, wrong, or None where it gave none."""
    return verdict is expected if verdict in DECIDED else None
