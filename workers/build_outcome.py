"""How a build command ended, judged alike wherever a step builds: in the slot's worktree (StepRunner), into a venv
image (ImageBuilder) and into a container image (ContainerImages). Each caller turns the judgement into its own
result; the order of the checks (the log, a cancel, the deadline, exit 0, a signature, a signal) is this module's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from bisector.vocab.domain import CANCELLED_DETAIL, ErrorKind
from bisector.vocab.metric import Judgement, MatchTimeoutError, infra_judgement, infra_signature
from bisector.vocab.metric_scan import METRIC_TIME_LIMIT_S
from bisector.workers.output import DETAIL_TAIL_BYTES
from bisector.workers.process import ProcessOutcome

# What a build's tools print when a process of theirs was SIGKILLed (the kernel's OOM killer, an operator): they exit
# with a code of their own (gcc 1, make 2), yet the build died of its host, not of the commit.
KILLED_SIGNATURES = (
    r"Killed signal terminated program",  # gcc's driver: a compiler pass killed
    r"terminated with signal 9\b",  # collect2: the linker killed
    r"unable to execute command: Killed",  # clang's driver
    r"died due to signal 9\b",  # nvcc: a pass (cicc, cudafe++, ptxas) killed
    r"\*\*\* \[[^\]\n]*\] Killed",  # make: a recipe killed
    r": (?:line \d+: +)?\d+ Killed  ",  # bash: a command of a script killed
)


class BuildEnd(Enum):
    SUCCEEDED = "succeeded"  # exit 0
    FAILED = "failed"  # exit 1-127 with no infrastructure signature: the commit does not build (a skip, its log tail)
    INFRA = "infra"  # a signal (exit < 0 or > 127) or an infrastructure signature: not the commit's fault (an error)
    TIMED_OUT = "timed_out"  # the step's deadline stopped it
    CANCELLED = "cancelled"
    LOG_FAILED = "log_failed"  # writing the step's log failed (a full disk) and stopped it


@dataclass(frozen=True)
class BuildOutcome:
    end: BuildEnd
    process: ProcessOutcome
    what: str  # what was built, as the reason names it: "build", "image build", "container image build"
    infra: Judgement | None = None  # the infrastructure signature's judgement, when one ended it

    @property
    def exit_code(self) -> int:
        return self.process.exit_code

    @property
    def build_s(self) -> float:
        return self.process.elapsed_s

    @property
    def error_kind(self) -> ErrorKind | None:
        """The kind of error it makes of the step: None where it is none (succeeded, failed, cancelled) and where the
        caller tells (the log failed: a harness error, or a full disk)."""
        if self.end is BuildEnd.TIMED_OUT:
            return ErrorKind.TIMEOUT
        if self.end is BuildEnd.INFRA:
            return self.infra.error_kind if self.infra is not None else ErrorKind.SIGNAL
        return None

    @property
    def why(self) -> str:
        """One line saying how it ended ("" when it succeeded)."""
        code = self.exit_code
        reasons = {
            BuildEnd.SUCCEEDED: "",
            BuildEnd.FAILED: f"{self.what} failed (exit {code})",
            BuildEnd.INFRA: self.infra.detail if self.infra is not None else f"{self.what} died (exit {code})",
            BuildEnd.TIMED_OUT: f"{self.what} timed out",
            BuildEnd.CANCELLED: CANCELLED_DETAIL,
            BuildEnd.LOG_FAILED: f"writing the step log: {self.process.log_error}",
        }
        return reasons[self.end]

    def detail(self, tail_chars: int = DETAIL_TAIL_BYTES) -> str:
        """why, and where the output tells more (failed, infra) the last tail_chars of its tail on the next lines."""
        if self.end in (BuildEnd.FAILED, BuildEnd.INFRA):
            return f"{self.why}\n{self.process.output.tail()[-tail_chars:]}"
        return self.why


def judge_build(
    process: ProcessOutcome, what: str, infra_patterns: tuple[str, ...] = (), time_limit_s: float = METRIC_TIME_LIMIT_S
) -> BuildOutcome:
    """How the build that gave process ended. infra_patterns (the spec's) and KILLED_SIGNATURES are looked for in a
    failed build's output within time_limit_s; a search that takes longer finds none."""
    if process.log_error is not None:
        return BuildOutcome(BuildEnd.LOG_FAILED, process, what)
    if process.cancelled:
        return BuildOutcome(BuildEnd.CANCELLED, process, what)
    if process.timed_out:
        return BuildOutcome(BuildEnd.TIMED_OUT, process, what)
    if process.exit_code == 0:
        return BuildOutcome(BuildEnd.SUCCEEDED, process, what)
    signature = infra_in_log(process.output.text(), infra_patterns, time_limit_s)
    if signature:
        return BuildOutcome(BuildEnd.INFRA, process, what, infra_judgement(signature))
    # an empty match (a pattern that matches no text) counts as infrastructure too, told as a death
    if signature is not None or process.exit_code < 0 or process.exit_code > 127:
        return BuildOutcome(BuildEnd.INFRA, process, what)
    return BuildOutcome(BuildEnd.FAILED, process, what)


def infra_in_log(output: str, infra_patterns: tuple[str, ...], time_limit_s: float = METRIC_TIME_LIMIT_S) -> str | None:
    """The infrastructure signature (the spec's patterns, then KILLED_SIGNATURES) in a build's output; None when
    there is none or the search runs past time_limit_s; "" for a pattern that matched empty text."""
    try:
        return infra_signature(output, (*infra_patterns, *KILLED_SIGNATURES), time_limit_s)
    except MatchTimeoutError:
        return None
