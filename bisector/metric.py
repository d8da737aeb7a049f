"""How a step's output becomes a verdict: the metric, the expectation, the exit-code rules.

Without a metric the exit code decides, as `git bisect run` does: 0 good, 125 skip, 1..127 bad; a
signal, a timeout or an exit code above 127 is an infrastructure error. With a metric, exit 125 still
skips, and a run that prints no metric is skipped (or bad with `--no-metric bad`).
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from bisector.domain import ErrorKind, Verdict
from bisector.errors import InputError

SKIP_EXIT_CODE = 125

# Signatures of failures that say nothing about the commit under test. Matched only when the run failed.
DEFAULT_INFRA_PATTERNS: tuple[str, ...] = (
    r"CUDA out of memory",
    r"torch\.OutOfMemoryError",
    r"CUDA error: out of memory",
    r"Connection refused",
    r"ConnectionRefusedError",
    r"ConnectionResetError",
    r"NCCL (?:error|WARN .*timeout)",
    r"operation not permitted when stream is capturing",
    r"HIPBLAS_STATUS_INTERNAL_ERROR",
    r"No space left on device",
    r"RayActorError|Worker (?:died|unexpectedly exits)",
    r"cudaErrorDevicesUnavailable|all CUDA-capable devices are busy or unavailable",
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

    @staticmethod
    def parse_json_target(text: str) -> tuple[str, str]:
        file, sep, key = text.rpartition(":")
        if not sep or not file or not key:
            raise InputError(f"--metric-json {text!r}: write FILE:KEY, e.g. results.json:accept_length")
        return file, key

    def read_samples(self, output: str, workdir: Path) -> tuple[list[float], str]:
        """The metric values the run produced, and why there are none when the list is empty."""
        if self.regex is not None:
            values = []
            for raw in re.findall(self.regex, output, flags=re.MULTILINE):
                value = _to_float(raw)
                if value is not None:
                    values.append(value)
            return values, "" if values else f"no match for metric regex {self.regex!r} in the output"
        assert self.json_file is not None
        assert self.json_key is not None
        path = workdir / self.json_file
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return [], f"metric file {self.json_file} unreadable: {exc}"
        value = _lookup(data, self.json_key)
        if value is None:
            return [], f"key {self.json_key!r} not found (or not a number) in {self.json_file}"
        return [value], ""


def _to_float(raw: object) -> float | None:
    try:
        value = float(str(raw))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


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
    return _to_float(node) if isinstance(node, (int, float, str)) else None


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    samples: tuple[float, ...] = ()
    error_kind: ErrorKind | None = None
    detail: str = ""


def infra_signature(output: str, patterns: tuple[str, ...]) -> str | None:
    for pattern in patterns:
        match = re.search(pattern, output)
        if match:
            return match.group(0)
    return None


def judge_run(spec: MetricSpec, exit_code: int, output: str, workdir: Path, *, timed_out: bool = False) -> Judgement:
    """The verdict of one finished run of the test command.

    exit_code follows subprocess conventions: negative for death by a signal.
    """
    if timed_out:
        return Judgement(Verdict.ERROR, error_kind=ErrorKind.TIMEOUT, detail="run timed out")
    if exit_code == SKIP_EXIT_CODE:
        return Judgement(Verdict.SKIP, detail="the test exited 125 (cannot test this commit)")
    failed = exit_code != 0
    if failed:
        signature = infra_signature(output, spec.infra_patterns)
        if signature is not None:
            return Judgement(Verdict.ERROR, error_kind=ErrorKind.INFRA, detail=f"infrastructure: {signature}")
    crashed = exit_code < 0 or exit_code > 127
    if not spec.has_metric:
        if crashed:
            return Judgement(Verdict.ERROR, error_kind=ErrorKind.SIGNAL, detail=_crash_detail(exit_code))
        return Judgement(Verdict.GOOD if exit_code == 0 else Verdict.BAD, detail=f"exit code {exit_code}")
    samples, why_none = spec.read_samples(output, workdir)
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


def _crash_detail(exit_code: int) -> str:
    if exit_code < 0:
        return f"the test died from signal {-exit_code}"
    return f"the test exited {exit_code} (above 127: a crash, not a verdict)"
