"""Sort each failure of the bad run into infrastructure, flaky or regression (the rules, in order):

A failing test case (failure or error in the bad run):
  1. a signature matches its message or logs            -> its class (infrastructure, or flaky for the
     (not the lines reporting a failed assertion,          operator's flaky signatures)
     `vocab.metric.ASSERTION_LINE`)
  2. it passed on retry in the bad run                  -> flaky
  3. its message compares one measured number with a    -> flaky, as a metric within the band is
     threshold (`assert 51.4 <= 51.0`, `latency 51.4 ms
     > 51.0 ms`) and the two are within the noise band
  4. it failed the same way in the good run             -> flaky (pre-existing); a different failure there,
                                                           or a measured number within the band there and
                                                           beyond it now (as for metrics), is a regression
  5. an error absent from the good run, named after a   -> regression of those tests, bisectable: a
     module or directory (`tests.test_x`) whose tests      collection error (pytest cannot import the
     passed in the good run and are absent from the bad    module or its conftest.py), bisected once by
     run                                                   running the module or directory
  6. otherwise                                          -> regression (bisectable when it passed in the good
                                                           run; a test absent or skipped there is reported
                                                           but not bisected)
A test that passed in the end after failed attempts is a failure too: flaky (passed on retry).
A metric past its threshold in the bad run:
  1. within the noise band of its threshold             -> flaky
  2. past the threshold beyond the band in the good run -> flaky (pre-existing)
  3. otherwise                                          -> regression
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bisector.triage.model import CaseResult, FailureClass, MetricResult, Outcome, RunResults
from bisector.triage.signatures import Signature
from bisector.vocab.errors import InputError
from bisector.vocab.metric import ASSERTION_LINE

DEFAULT_NOISE_BAND = "1%"
_EXCEPTION_LINE = re.compile(r"^E +([A-Za-z_][\w.]*: .*|[A-Za-z_][\w.]*(?:Error|Exception))$", re.MULTILINE)
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")
_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
# a measured number, an optional unit, a comparison, the threshold: "51.4 <= 51.0", "51.4 ms > 51.0 ms"
_COMPARISON = re.compile(rf"(?<![\w.])({_NUMBER})\s*[^\W\d]*\s*(?:<=|>=|<|>)\s*({_NUMBER})[^\W\d]*(?![\w.])")


@dataclass(frozen=True)
class NoiseBand:
    """How far past its threshold a metric may be and still count as noise: absolute, or relative."""

    amount: float
    relative: bool

    @classmethod
    def parse(cls, text: str) -> NoiseBand:
        raw = text.strip()
        relative = raw.endswith("%")
        try:
            amount = float(raw.removesuffix("%"))
        except ValueError:
            amount = -1.0
        if not 0 <= amount < float("inf"):
            raise InputError(f"noise band {text!r}: write an absolute amount (0.5) or a percentage (1%)")
        return cls(amount / 100 if relative else amount, relative)

    def width(self, threshold: float) -> float:
        return self.amount * abs(threshold) if self.relative else self.amount

    def __str__(self) -> str:
        return f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"


@dataclass(frozen=True)
class Failure:
    test: str
    failure_class: FailureClass
    reason: str
    bisectable: bool = False  # a regression whose good run passed: a bisect can start from it
    collection_error: bool = False  # the case is a module or directory whose tests could not be collected
    case: CaseResult | None = None
    metric: MetricResult | None = None

    @property
    def kind(self) -> str:
        return "metric" if self.metric is not None else "test"


def classify(good: RunResults, bad: RunResults, signatures: Sequence[Signature], band: NoiseBand) -> list[Failure]:
    """Every failure of the bad run, in the order of its results (tests, then metrics)."""
    vanished = [case for name, case in good.cases.items() if case.outcome is Outcome.PASSED and name not in bad.cases]
    failures = [
        _classify_case(case, good.cases.get(name), vanished, signatures, band)
        for name, case in bad.cases.items()
        if case.outcome.is_failure() or case.passed_on_retry
    ]
    failures += [
        _classify_metric(metric, good.metrics.get(name), band)
        for name, metric in bad.metrics.items()
        if not metric.passes()
    ]
    return failures


def _classify_case(
    case: CaseResult,
    before: CaseResult | None,
    vanished: Sequence[CaseResult],
    signatures: Sequence[Signature],
    band: NoiseBand,
) -> Failure:
    """`vanished`: the tests that passed in the good run and are absent from the bad run."""
    text = ASSERTION_LINE.sub("", case.text)
    for signature in signatures:
        matched = signature.search(text)
        if matched is not None:
            label = signature.failure_class.value
            reason = f"{label} signature {signature.name!r}: {_clip(matched)}"
            return Failure(case.name, signature.failure_class, reason, case=case)
    if case.passed_on_retry:
        reason = f"passed on retry after {case.failed_attempts} failed attempt(s): {_clip(case.message)}"
        return Failure(case.name, FailureClass.FLAKY, reason, case=case)
    within = _measured_within_band(case.message, band)
    if within is not None:
        return Failure(case.name, FailureClass.FLAKY, within, case=case)
    if before is not None and before.outcome.is_failure():
        if before.outcome is case.outcome and _same_way(before.message, case.message):
            if _measured_within_band(before.message, band) is None:
                reason = f"pre-existing: failed the same way in the good run: {_clip(case.message)}"
                return Failure(case.name, FailureClass.FLAKY, reason, case=case)
            now, then = _clip(case.message), _clip(before.message)
            reason = f"beyond the noise band ({band}): {now}; within it in the good run: {then}"
            return Failure(case.name, FailureClass.REGRESSION, reason, case=case)
        reason = f"failed differently in the good run ({_clip(before.message)}); now: {_clip(case.message)}"
        return Failure(case.name, FailureClass.REGRESSION, reason, case=case)
    kept_from_running = _collected_under(case, vanished) if before is None else []
    if kept_from_running:
        error = _clip(_raised(case.text) or case.message)
        count = len(kept_from_running)
        reason = f"collection error; its {count} test(s) that passed in the good run did not run: {error}"
        return Failure(case.name, FailureClass.REGRESSION, reason, bisectable=True, case=case, collection_error=True)
    if before is None or before.outcome is Outcome.SKIPPED:
        where = "absent from" if before is None else "skipped in"
        reason = f"{case.outcome.value} ({where} the good run, so not bisected): {_clip(case.message)}"
        return Failure(case.name, FailureClass.REGRESSION, reason, case=case)
    reason = f"{case.outcome.value} (passed in the good run): {_clip(case.message)}"
    return Failure(case.name, FailureClass.REGRESSION, reason, bisectable=True, case=case)


def _collected_under(error: CaseResult, tests: Sequence[CaseResult]) -> list[CaseResult]:
    """The tests whose module or directory an error is named after (classname `tests.test_x` or
    `tests.test_x.TestK` under `tests.test_x`; anything under the directory `tests.gpu`)."""
    where = error.address
    if error.outcome is not Outcome.ERROR or not where:
        return []
    return [test for test in tests if test.classname == where or test.classname.startswith(where + ".")]


def _raised(text: str) -> str | None:
    """The exception a pytest report ends with (`E   ModuleNotFoundError: No module named 'x'`): JUnit's message
    for a collection error is only "collection failure"."""
    raised = _EXCEPTION_LINE.findall(text)
    return raised[-1] if raised else None


def _classify_metric(metric: MetricResult, before: MetricResult | None, default_band: NoiseBand) -> Failure:
    band = NoiseBand.parse(metric.noise_band) if metric.noise_band is not None else default_band
    width = band.width(metric.threshold)
    past_by = abs(metric.value - metric.threshold)
    measured = f"{metric.value:g} vs threshold {metric.threshold:g} ({metric.direction.value} is better)"
    within = _within_band(measured, metric.value, metric.threshold, band)
    if within is not None:
        return Failure(metric.name, FailureClass.FLAKY, within, metric=metric)
    if before is not None and not before.passes() and abs(before.value - before.threshold) > width:
        reason = f"pre-existing: past the threshold in the good run too ({before.value:g}); now {measured}"
        return Failure(metric.name, FailureClass.FLAKY, reason, metric=metric)
    was = f"{before.value:g} in the good run" if before is not None else "absent from the good run"
    reason = f"{measured}, {past_by:g} past (band {band} = {width:g}); {was}"
    return Failure(metric.name, FailureClass.REGRESSION, reason, bisectable=before is not None, metric=metric)


def _within_band(measured: str, value: float, threshold: float, band: NoiseBand) -> str | None:
    """The flaky reason when value is within the band of threshold (one rule for metrics and test messages). A band
    of no width (0, or relative to a threshold of 0) holds no failure: `assert 0 > 0` is no noise."""
    width, past_by = band.width(threshold), abs(value - threshold)
    if past_by > width or width == 0:
        return None
    return f"within the noise band: {measured}, {past_by:g} past, band {band} = {width:g}"


def _measured(message: str) -> tuple[float, float] | None:
    """The measured number and its threshold of a message that compares exactly one number with another."""
    compared = _COMPARISON.findall(message)
    if len(compared) != 1:
        return None
    value, threshold = map(float, compared[0])
    return value, threshold


def _measured_within_band(message: str, band: NoiseBand) -> str | None:
    """The flaky reason when message compares a measured number with its threshold within the band."""
    measured = _measured(message)
    if measured is None:
        return None
    value, threshold = measured
    return _within_band(f"{value:g} vs threshold {threshold:g}", value, threshold, band)


def _same_way(before: str, after: str) -> bool:
    return _NUMBERS.sub("N", before) == _NUMBERS.sub("N", after)


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
