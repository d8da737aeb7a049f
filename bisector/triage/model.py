"""What one CI run recorded, as the triage reads it: test cases (JUnit) and metrics (metrics JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from bisector.vocab.metric import Direction


class FailureClass(StrEnum):
    INFRASTRUCTURE = "infrastructure"  # the machine, network or runner failed: reported, never bisected
    FLAKY = "flaky"  # within the noise band, passed on retry, or failing before the change (pre-existing)
    REGRESSION = "regression"  # failed after the change, passed before it: worth a bisect


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # an assertion failed (<failure>)
    ERROR = "error"  # the test could not run to its end (<error>: setup, teardown, collection, crash)
    SKIPPED = "skipped"

    def is_failure(self) -> bool:
        return self in (Outcome.FAILED, Outcome.ERROR)


@dataclass(frozen=True)
class CaseResult:
    """One test case, merged over every time it appears in a run (reruns, retries)."""

    name: str  # "classname::name" as JUnit records it, e.g. "tests.test_gemm.TestGemm::test_small[8]"
    classname: str
    case: str
    file: str  # the `file` attribute when the producer wrote one, else ""
    outcome: Outcome  # the final attempt's outcome
    message: str  # first line of the final (or last failed) attempt's message
    text: str  # message, traceback, system-out and system-err of every attempt, bounded
    failed_attempts: int  # attempts that failed before the final one (reruns)

    @property
    def address(self) -> str:
        """classname and name joined by ".": what a collection error is named after, a module or directory
        (`tests.test_x`), whether the producer wrote it as the name alone (pytest) or split it."""
        return ".".join(part for part in (self.classname, self.case) if part)

    @property
    def passed_on_retry(self) -> bool:
        return self.outcome is Outcome.PASSED and self.failed_attempts > 0


@dataclass(frozen=True)
class MetricResult:
    """A measured value and its threshold: `direction` lower means value <= threshold passes."""

    name: str
    value: float
    threshold: float
    direction: Direction
    noise_band: str | None = None  # per-metric band ("1%" or "0.5"), overrides --noise-band
    run: str | None = None  # shell command that measures it (for --submit)
    pattern: str | None = None  # regex with one group capturing the value from that command's output

    def passes(self) -> bool:
        if self.direction is Direction.LOWER:
            return self.value <= self.threshold
        return self.value >= self.threshold

    @property
    def expect(self) -> str:
        """The passing condition as `bisect start --expect` writes it."""
        return f"{'<=' if self.direction is Direction.LOWER else '>='} {self.threshold:g}"


@dataclass
class RunResults:
    """Everything read from one CI run's result files."""

    sources: list[str] = field(default_factory=list)
    commit: str | None = None
    cases: dict[str, CaseResult] = field(default_factory=dict)
    metrics: dict[str, MetricResult] = field(default_factory=dict)
