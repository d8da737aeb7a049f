"""The table of the motivating PR: per GEMM shape (N, K), where the MMA kernel starts before -> after, and
which kernel bs=1 decode (m = decode_m) and speculative verify (m = verify_m = k + 1) take; plus the one-line
conclusion ("batch-variant: the same row takes SIMT at m=1 and MMA at m=8").

Rows come from the static diff (table entries keyed (N, K) whose values are "MMA from this m" thresholds) and
from the runtime dispatch diff; the trace wins where both speak, since it shows what actually ran.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bisector.analysis.dispatch_diff import DispatchDiff
from bisector.analysis.findings import Finding, FindingKind

DEFAULT_DECODE_M = 1
DEFAULT_VERIFY_M = 8  # the motivating case: 7 draft tokens + 1 verified in one pass
MAX_GUESSED_VERIFY_M = 16  # k + 1 of speculative decoding rarely exceeds this
THRESHOLD_TABLE = re.compile(r"(?i)min_m|mma|threshold")  # table names read as "MMA from m" tables
UNKNOWN = "?"
_SHAPE_KEY = re.compile(r"^\[\((-?\d+), (-?\d+)\)\]$")
_NAMED_INT = re.compile(r"^(?P<name>[A-Za-z_][\w.]*) \((?P<value>-?\d+)\)$")
_ANY_INT = re.compile(r"\((-?\d+)\)$")


@dataclass(frozen=True)
class ShapeRow:
    n: int
    k: int
    ops: tuple[str, ...]  # the ops that dispatched this shape in the traces
    mma_from_before: str  # "SIMT_ONLY", "8", "no row", "<=8 (cost_model)"
    mma_from_after: str
    decode_before: str  # "SIMT", "MMA", "?" (unknown)
    decode_after: str
    verify_before: str
    verify_after: str
    source: str  # "static", "trace" or "static+trace"

    @property
    def became_batch_variant(self) -> bool:
        """Different kernels at decode and verify after the commit, and not known to differ before it."""
        return _variant(self.decode_after, self.verify_after) and not _variant(self.decode_before, self.verify_before)


def _variant(decode: str, verify: str) -> bool:
    return UNKNOWN not in (decode, verify) and decode != verify


@dataclass(frozen=True)
class ShapeTable:
    decode_m: int
    verify_m: int
    rows: tuple[ShapeRow, ...]

    @property
    def conclusion(self) -> str | None:
        """One line: whether the culprit made a row take different kernels at decode and at verify."""
        variant = [row for row in self.rows if row.became_batch_variant]
        if variant:
            kernels = {(row.decode_after, row.verify_after) for row in variant}
            if len(kernels) == 1:
                decode, verify = next(iter(kernels))
                takes = f"{decode} at m={self.decode_m} and {verify} at m={self.verify_m}"
            else:
                takes = f"different kernels at m={self.decode_m} and m={self.verify_m}"
            shapes = ", ".join(f"({row.n}, {row.k})" for row in variant)
            line = f"batch-variant: the same row takes {takes} for (N, K) = {shapes}"
            before = {row.decode_before for row in variant}
            if UNKNOWN not in before:
                if len(before) == 1:
                    line += f"; at the last good commit each took {next(iter(before))} at both"
                else:
                    groups = "; ".join(
                        f"{kernel} for " + ", ".join(f"({r.n}, {r.k})" for r in variant if r.decode_before == kernel)
                        for kernel in sorted(before)
                    )
                    line += f"; at the last good commit each took one kernel at both ({groups})"
            return line
        known = [row for row in self.rows if UNKNOWN not in (row.decode_after, row.verify_after)]
        if known and len(known) == len(self.rows):
            return f"batch-invariant: every changed shape takes one kernel at m={self.decode_m} and m={self.verify_m}"
        return None


def shape_table(
    findings: Sequence[Finding],
    dispatch: DispatchDiff | None = None,
    *,
    decode_m: int = DEFAULT_DECODE_M,
    verify_m: int | None = None,
) -> ShapeTable:
    """Rows for every (N, K) whose threshold row changed statically or whose dispatch changed at run time.

    verify_m None (pass k + 1 when the test's k is known): from the first bad run's trace, the largest m up to
    MAX_GUESSED_VERIFY_M whose kernel differs from the decode kernel for some shape (prefill of a real prompt
    is longer, a verify batch is not), else the smallest such m above it, else DEFAULT_VERIFY_M.
    """
    static = _static_thresholds(findings)
    verify = verify_m if verify_m is not None else _pick_verify_m(dispatch, decode_m)
    shapes = list(static)
    if dispatch is not None:
        shapes += [row.shape for row in dispatch.rows if row.shape not in static]
    rows = [_shape_row(shape, static.get(shape), dispatch, decode_m, verify) for shape in dict.fromkeys(shapes)]
    return ShapeTable(decode_m, verify, tuple(rows))


@dataclass(frozen=True)
class _Threshold:
    text: str
    value: int | None


def _static_thresholds(findings: Sequence[Finding]) -> dict[tuple[int, int], tuple[_Threshold, _Threshold]]:
    rows: dict[tuple[int, int], tuple[_Threshold, _Threshold]] = {}
    for finding in findings:
        if finding.kind is not FindingKind.TABLE_ENTRY or not THRESHOLD_TABLE.search(finding.name):
            continue
        key = _SHAPE_KEY.match(finding.key)
        if key is None:
            continue
        before, after = _threshold(finding.before), _threshold(finding.after)
        if (before.value is None and finding.before is not None) or (after.value is None and finding.after is not None):
            continue  # not an integer threshold: some other table keyed by shape
        rows[(int(key[1]), int(key[2]))] = (before, after)
    return rows


def _threshold(text: str | None) -> _Threshold:
    if text is None:
        return _Threshold("no row", None)
    if text.lstrip("-").isdigit():
        return _Threshold(text, int(text))
    named = _NAMED_INT.match(text)
    if named is not None:
        return _Threshold(named["name"], int(named["value"]))
    trailing = _ANY_INT.search(text)
    return _Threshold(text, int(trailing[1]) if trailing else None)


def _pick_verify_m(dispatch: DispatchDiff | None, decode_m: int) -> int:
    if dispatch is None:
        return DEFAULT_VERIFY_M
    candidates = sorted(
        {
            row.m
            for row in dispatch.rows
            if row.m > decode_m
            and row.after
            and dispatch.kernels_at(row.shape, decode_m, after=True)
            and {row.after} != dispatch.kernels_at(row.shape, decode_m, after=True)
        }
    )
    small = [m for m in candidates if m <= MAX_GUESSED_VERIFY_M]
    return small[-1] if small else candidates[0] if candidates else DEFAULT_VERIFY_M


def _shape_row(
    shape: tuple[int, int],
    static: tuple[_Threshold, _Threshold] | None,
    dispatch: DispatchDiff | None,
    decode_m: int,
    verify_m: int,
) -> ShapeRow:
    traced = dispatch is not None and any(row.shape == shape for row in dispatch.rows)
    sides: list[tuple[str, str, str]] = []  # (mma from, decode kernel, verify kernel) for before, after
    for index, after in enumerate((False, True)):
        threshold = static[index] if static else None
        decode = _traced_kernel(dispatch, shape, decode_m, after) or _static_kernel(threshold, decode_m)
        verify = _traced_kernel(dispatch, shape, verify_m, after) or _static_kernel(threshold, verify_m)
        mma_from = threshold.text if threshold else _traced_threshold(dispatch, shape, after)
        sides.append((mma_from, decode, verify))
    ops = tuple(dict.fromkeys(row.op for row in dispatch.rows if row.shape == shape)) if dispatch else ()
    source = "+".join(part for part, present in (("static", static is not None), ("trace", traced)) if present)
    (from_before, decode_before, verify_before), (from_after, decode_after, verify_after) = sides
    return ShapeRow(
        shape[0], shape[1], ops, from_before, from_after,
        decode_before, decode_after, verify_before, verify_after, source,
    )  # fmt: skip


def _traced_kernel(dispatch: DispatchDiff | None, shape: tuple[int, int], m: int, after: bool) -> str:
    if dispatch is None:
        return ""
    kernels = dispatch.kernels_at(shape, m, after=after)
    return "|".join(sorted(kernels)).upper()


def _static_kernel(threshold: _Threshold | None, m: int) -> str:
    if threshold is None or threshold.value is None:
        return UNKNOWN
    return "MMA" if m >= threshold.value else "SIMT"


def _traced_threshold(dispatch: DispatchDiff | None, shape: tuple[int, int], after: bool) -> str:
    """Bounds on the MMA threshold from the m's the run dispatched, e.g. '2..8 (cost_model)'."""
    if dispatch is None:
        return UNKNOWN
    rows = [r for r in dispatch.rows if r.shape == shape and (r.after if after else r.before)]
    if not rows:
        return "not dispatched"
    simt = [r.m for r in rows if (r.after if after else r.before) == "simt"]
    mma = [r.m for r in rows if (r.after if after else r.before) == "mma"]
    reasons = sorted({reason for r in rows for reason in (r.reason_after if after else r.reason_before).split("|")})
    why = f" ({', '.join(reason for reason in reasons if reason)})" if any(reasons) else ""
    if not mma:
        return f">{max(simt)}{why}" if simt else f"{UNKNOWN}{why}"
    low = max((m for m in simt if m < min(mma)), default=0) + 1
    return f"{min(mma)}{why}" if low == min(mma) else f"{low}..{min(mma)}{why}"
