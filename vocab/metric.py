"""How a step's output becomes a verdict: the metric, the expectation, the exit-code rules.

Without a metric the exit code decides, as `git bisect run` does: 0 good, 125 skip, 1..127 bad; a
signal, a timeout or an exit code above 127 is an infrastructure error. With a metric, exit 125 still
skips, and a run that prints no metric is skipped (or bad with `--no-metric bad`).

Matching is bounded. The metric regex reads the output as it streams (vocab/metric_scan.py): the metric is found
wherever it is printed, the last value printed wins, in bounded memory. The infrastructure signatures are matched
against a bounded window of the output (a step passes the last 1 MiB of its run's output, workers/output.py).
Matching has time limits (the third-party `regex` module's timeout, which counts CPU time: on a busy host it takes
longer on the clock; METRIC_TIME_LIMIT_S at most): each search of the metric scan, and the judging of a finished run.
A pattern that backtracks past one gives a skip that says so, never a hang. `--metric-json FILE:KEY` reads FILE
inside the step's own worktree (a relative path that stays inside it; at most METRIC_FILE_MAX_BYTES).
"""

from __future__ import annotations

import json
import operator
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath

from bisector.vocab.domain import ErrorKind, Verdict
from bisector.vocab.errors import InputError
from bisector.vocab.metric_scan import METRIC_TIME_LIMIT_S, MetricScan, to_float

SKIP_EXIT_CODE = 125
METRIC_FILE_MAX_BYTES = 16 << 20
DISK_FULL_SIGNATURE = "No space left on device"

# Signatures of failures that say nothing about the commit under test. Matched only when the run failed, and never
# in the lines where a test reports its own failed assertion (ASSERTION_LINE).
DEFAULT_INFRA_PATTERNS: tuple[str, ...] = (
    r"CUDA out of memory",
    r"torch\.OutOfMemoryError",
    r"CUDA error: out of memory",
    r"Connection refused",
    r"ConnectionRefusedError",
    r"ConnectionResetError",
    r"Connection reset by peer",
    r"Temporary failure in name resolution|Name or service not known|Could not resolve host",
    r"NCCL (?:error|WARN .*timeout)",
    r"operation not permitted when stream is capturing",
    r"HIPBLAS_STATUS_INTERNAL_ERROR",
    DISK_FULL_SIGNATURE,
    r"RayActorError|Worker (?:died|unexpectedly exits)",
    r"cudaErrorDevicesUnavailable|all CUDA-capable devices are busy or unavailable",
)

# A line that says what a test expected, not what happened to the machine: pytest's failing source line (`>   ...`), a
# failed assertion (`AssertionError: ...`, pytest's `E   assert ...`, its short summary `FAILED id - AssertionError:
# ...`) and an expected exception that did not come (`Failed: DID NOT RAISE ...`), colour codes allowed before it.
ASSERTION_LINE = re.compile(
    r"^(?:\x1b\[[\d;]*m)*(?:>.*|(?:E\s+|FAILED \S+ - )?(?:AssertionError\b|assert\b|Failed: DID NOT RAISE\b).*)$",
    re.MULTILINE,
)


class NoMetricPolicy(StrEnum):
    SKIP = "skip"  # a run that prints no metric cannot be judged here
    BAD = "bad"  # a crash before the metric is the regression itself


class Direction(StrEnum):
    HIGHER = "higher"  # higher is better (throughput, accept length)
    LOWER = "lower"  # lower is better (latency)


_OPS: dict[str, tuple[Callable[[float, float], bool], Direction]] = {
    ">=": (operator.ge, Direction.HIGHER),
    ">": (operator.gt, Direction.HIGHER),
    "<=": (operator.le, Direction.LOWER),
    "<": (operator.lt, Direction.LOWER),
}
_EXPECT_RE = re.compile(r"^\s*(>=|<=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Expectation:
    """A good commit's metric satisfies `value <op> threshold`, e.g. `>= 4.0`."""

    op: str
    threshold: float

    @classmethod
    def parse(cls, text: str) -> Expectation:
        match = _EXPECT_RE.match(text)
        if not match:
            raise InputError(f"--expect {text!r} does not parse; write a comparison such as '>= 4.0' or '< 51.0'")
        return cls(match.group(1), float(match.group(2)))

    @property
    def direction(self) -> Direction:
        return _OPS[self.op][1]

    def is_met(self, value: float) -> bool:
        return _OPS[self.op][0](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.op} {self.threshold:g}"


@dataclass(frozen=True)
class MetricSpec:
    """Where the metric comes from and what a good value is. None of regex/json_file: exit code decides."""

    regex: str | None = None
    json_file: str | None = None
    json_key: str | None = None
    expect: Expectation | None = None
    no_metric: NoMetricPolicy = NoMetricPolicy.SKIP
    infra_patterns: tuple[str, ...] = DEFAULT_INFRA_PATTERNS
    comparative: bool = False  # --expect auto: samples are judged against the endpoints' samples

    def __post_init__(self) -> None:
        if self.regex is not None:
            try:
                compiled = re.compile(self.regex, re.MULTILINE)
            except re.error as exc:
                raise InputError(f"--metric {self.regex!r} is not a valid regex: {exc}") from None
            if compiled.groups != 1:
                raise InputError(
                    f"--metric {self.regex!r} must have exactly one group around the number, "
                    f"e.g. 'accept length: ([0-9.]+)' (it has {compiled.groups})"
                )
        if self.regex and self.json_file:
            raise InputError("give --metric or --metric-json, not both")
        if self.json_file is not None and not self.json_key:
            raise InputError("--metric-json takes FILE:KEY, e.g. results.json:accept_length")
        if self.json_file is not None and not _inside(self.json_file):
            raise InputError(
                f"--metric-json {self.json_file!r}: FILE must be a relative path inside the worktree "
                "(each step reads its own copy), e.g. results.json or out/results.json"
            )
        if self.has_metric and self.expect is None and not self.comparative:
            raise InputError("a metric needs --expect, e.g. --expect '>= 4.0' (or --expect auto)")
        if not self.has_metric and (self.expect is not None or self.comparative):
            raise InputError("--expect needs a metric: give --metric REGEX or --metric-json FILE:KEY")
        for pattern in self.infra_patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InputError(f"infrastructure pattern {pattern!r} is not a valid regex: {exc}") from None

    @property
    def has_metric(self) -> bool:
        return self.regex is not None or self.json_file is not None

    def scan(self, time_limit_s: float = METRIC_TIME_LIMIT_S) -> MetricScan | None:
        """A MetricScan to feed the run's output to as it streams (None without a metric regex)."""
        return MetricScan(self.regex, time_limit_s) if self.regex is not None else None

    @staticmethod
    def parse_json_target(text: str) -> tuple[str, str]:
        file, sep, key = text.rpartition(":")
        if not sep or not file or not key:
            raise InputError(f"--metric-json {text!r}: write FILE:KEY, e.g. results.json:accept_length")
        return file, key

    def read_samples(
        self, output: str, workdir: Path, time_limit_s: float = METRIC_TIME_LIMIT_S, scan: MetricScan | None = None
    ) -> tuple[list[float], str]:
        """The metric values the run produced, and why there are none when the list is empty. The regex is matched
        by scan (fed the run's output as it streamed) when given, else on output.

        Raises MatchTimeoutError when the regex takes longer than time_limit_s (or scan's own limit)."""
        if self.regex is not None:
            if scan is None:
                scan = MetricScan(self.regex, time_limit_s)
                scan.feed_text(output)
            scan.finish(time_limit_s)
            if scan.timed_out:
                raise MatchTimeoutError(self.regex, scan.time_limit_s)
            values = list(scan.values)
            return values, "" if values else f"no match for metric regex {self.regex!r} in the output"
        assert self.json_file is not None
        assert self.json_key is not None
        text, why_not = _read_inside(workdir, self.json_file)
        if text is None:
            return [], why_not
        try:
            data = json.loads(text)
        except ValueError as exc:
            return [], f"metric file {self.json_file} unreadable: {exc}"
        value = _lookup(data, self.json_key)
        if value is None:
            return [], f"key {self.json_key!r} not found (or not a number) in {self.json_file}"
        return [value], ""


class MatchTimeoutError(Exception):
    """A pattern took longer than its time limit (limit_s, where known) on the output."""

    def __init__(self, pattern: str, limit_s: float | None = None) -> None:
        super().__init__(pattern, limit_s)
        self.pattern, self.limit_s = pattern, limit_s


def _search(pattern: str, text: str, time_limit_s: float) -> str | None:
    import regex

    try:
        match = regex.search(pattern, text, timeout=max(time_limit_s, 0.001))
    except TimeoutError:
        raise MatchTimeoutError(pattern) from None
    return str(match.group(0)) if match else None


def _inside(relative: str) -> bool:
    path = PurePosixPath(relative)
    return not path.is_absolute() and ".." not in path.parts


def _read_inside(workdir: Path, relative: str) -> tuple[str | None, str]:
    """The text of workdir/relative, or None and why not (missing, a link out of workdir, too large)."""
    path = workdir / relative
    try:
        if not path.resolve().is_relative_to(workdir.resolve()):
            return None, f"metric file {relative} leads out of the worktree (a link to {path.resolve()})"
        with path.open("rb") as file:
            data = file.read(METRIC_FILE_MAX_BYTES + 1)
    except OSError as exc:
        return None, f"metric file {relative} unreadable: {exc}"
    if len(data) > METRIC_FILE_MAX_BYTES:
        return None, f"metric file {relative} is larger than {METRIC_FILE_MAX_BYTES >> 20} MiB"
    return data.decode(errors="replace"), ""


def _lookup(data: object, dotted_key: str) -> float | None:
    """`a.b.0.c` walks dicts by key and lists by index."""
    node = data
    for part in dotted_key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    if isinstance(node, bool):
        return None
    return to_float(node) if isinstance(node, (int, float, str)) else None


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    samples: tuple[float, ...] = ()
    error_kind: ErrorKind | None = None
    detail: str = ""


def infra_signature(output: str, patterns: tuple[str, ...], time_limit_s: float = METRIC_TIME_LIMIT_S) -> str | None:
    """The first infrastructure signature found in output, outside its assertion lines (ASSERTION_LINE). Raises
    MatchTimeoutError past time_limit_s in all."""
    deadline = time.monotonic() + time_limit_s
    output = ASSERTION_LINE.sub("", output)
    for pattern in patterns:
        found = _search(pattern, output, deadline - time.monotonic())
        if found is not None:
            return found
    return None


def judge_run(
    spec: MetricSpec,
    exit_code: int,
    output: str,
    workdir: Path,
    *,
    timed_out: bool = False,
    time_limit_s: float = METRIC_TIME_LIMIT_S,
    scan: MetricScan | None = None,
) -> Judgement:
    """The verdict of one finished run of the test command.

    exit_code follows subprocess conventions: negative for death by a signal. output: a bounded window of what
    the run printed; scan: the metric regex's MetricScan fed the whole output as it streamed (without one the
    metric is looked for in output). Matching after the run takes at most time_limit_s (capped at
    METRIC_TIME_LIMIT_S; each of a scan's searches while the run streamed has the scan's own limit); past it the
    run is skipped with the reason.
    """
    limit_s = min(time_limit_s, METRIC_TIME_LIMIT_S)
    try:
        return _judge(spec, exit_code, output, workdir, timed_out, time.monotonic() + limit_s, scan)
    except MatchTimeoutError as slow:
        took_s = slow.limit_s if slow.limit_s is not None else limit_s
        return Judgement(
            Verdict.SKIP,
            detail=f"metric regex took longer than {took_s:g} s on the output (pattern {slow.pattern!r}): "
            "the commit could not be judged; simplify the pattern (nested repeats backtrack)",
        )


# What bash means by the codes it returns itself (`git bisect run` refuses them at the good commit as bogus)
_SHELL_EXIT_MEANINGS = {126: ": the shell could not run a command (not executable)", 127: ": command not found"}


def _judge(
    spec: MetricSpec,
    exit_code: int,
    output: str,
    workdir: Path,
    timed_out: bool,
    deadline: float,
    scan: MetricScan | None,
) -> Judgement:
    if timed_out:
        return Judgement(Verdict.ERROR, error_kind=ErrorKind.TIMEOUT, detail="run timed out")
    if exit_code == SKIP_EXIT_CODE:
        return Judgement(Verdict.SKIP, detail="the test exited 125 (cannot test this commit)")
    failed = exit_code != 0
    if failed:
        signature = infra_signature(output, spec.infra_patterns, deadline - time.monotonic())
        if signature is not None:
            return infra_judgement(signature)
    crashed = exit_code < 0 or exit_code > 127
    if not spec.has_metric:
        if crashed:
            return Judgement(Verdict.ERROR, error_kind=ErrorKind.SIGNAL, detail=_crash_detail(exit_code))
        meaning = _SHELL_EXIT_MEANINGS.get(exit_code, "")
        return Judgement(Verdict.GOOD if exit_code == 0 else Verdict.BAD, detail=f"exit code {exit_code}{meaning}")
    samples, why_none = spec.read_samples(output, workdir, deadline - time.monotonic(), scan)
    if not samples:
        if crashed:
            return Judgement(Verdict.ERROR, error_kind=ErrorKind.SIGNAL, detail=_crash_detail(exit_code))
        verdict = Verdict.BAD if spec.no_metric is NoMetricPolicy.BAD else Verdict.SKIP
        return Judgement(verdict, detail=f"{why_none} (exit code {exit_code})")
    value = samples[-1]
    if spec.comparative:
        return Judgement(Verdict.MEASURED, tuple(samples), detail=f"metric {value:g} (judged against the endpoints)")
    assert spec.expect is not None
    verdict = Verdict.GOOD if spec.expect.is_met(value) else Verdict.BAD
    return Judgement(verdict, tuple(samples), detail=f"metric {value:g} (expect {spec.expect})")


def infra_judgement(signature: str) -> Judgement:
    """An infrastructure failure; a full disk is told apart (the bisect pauses until space is freed)."""
    if signature == DISK_FULL_SIGNATURE:
        return Judgement(
            Verdict.ERROR, error_kind=ErrorKind.DISK_FULL, detail=f"disk full: the command failed with {signature!r}"
        )
    return Judgement(Verdict.ERROR, error_kind=ErrorKind.INFRA, detail=f"infrastructure: {signature}")


def _crash_detail(exit_code: int) -> str:
    if exit_code < 0:
        return f"the test died from signal {-exit_code}"
    return f"the test exited {exit_code} (above 127: a crash, not a verdict)"
