"""Runtime dispatch diff: the dispatch traces of the last good and the first bad commit, compared per
(op, N, K, m).

A trace is the JSON-lines file that kernels/ writes with KERNELS_DISPATCH_TRACE=FILE, one distinct decision a
line: {"op": ..., "N": ..., "K": ..., "m": ..., "kernel": "simt"|"mma", "reason": "table"|"cost_model"|
"override"}. An optional "count" field is summed; repeated lines count once each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bisector.analysis.findings import Finding, FindingKind

SUMMARY_NAME = "(summary)"
UNCHANGED_DETAIL = "same kernel at every m"
_KEY = re.compile(r"^N=(-?\d+) K=(-?\d+) m=(-?\d+)$")
_SHAPE = re.compile(r"^N=(-?\d+) K=(-?\d+)$")
_SIDE = re.compile(r"^(?P<kernel>[^()]+?)(?: \((?P<reason>[^()]*)\))?$")


@dataclass(frozen=True)
class Decision:
    op: str
    n: int
    k: int
    m: int
    kernel: str  # "simt", "mma", ...
    reason: str = ""
    count: int = 1


@dataclass(frozen=True)
class DispatchTrace:
    decisions: tuple[Decision, ...]
    bad_lines: int = 0  # lines that were not a decision (a process killed mid-write, another format)


def read_dispatch_trace(path: Path) -> DispatchTrace:
    """The decisions of a trace file; a missing file is an empty trace."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return DispatchTrace(())
    return parse_dispatch_trace(text.splitlines())


def parse_dispatch_trace(lines: Iterable[str]) -> DispatchTrace:
    decisions: list[Decision] = []
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            count = raw.get("count", 1)
            decisions.append(
                Decision(
                    op=str(raw["op"]),
                    n=int(raw["N"]),
                    k=int(raw["K"]),
                    m=int(raw["m"]),
                    kernel=str(raw["kernel"]).lower(),
                    reason=str(raw.get("reason") or ""),
                    count=int(count) if isinstance(count, int) else 1,
                )
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            bad += 1
    return DispatchTrace(tuple(decisions), bad)


@dataclass(frozen=True)
class DispatchRow:
    """One (op, N, K, m): the kernel in the last good run and in the first bad run (None: not dispatched)."""

    op: str
    n: int
    k: int
    m: int
    before: str | None
    after: str | None
    reason_before: str = ""
    reason_after: str = ""
    count_before: int = 0
    count_after: int = 0

    @property
    def changed(self) -> bool:
        return self.before != self.after

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)


@dataclass(frozen=True)
class DispatchDiff:
    """Every (op, N, K, m) of each op-shape that changed (the unchanged m's of it too, for context)."""

    rows: tuple[DispatchRow, ...]
    unchanged_shapes: int = 0  # (op, N, K) dispatched identically at every m in both runs
    decisions_before: int = 0
    decisions_after: int = 0
    unchanged_keys: tuple[tuple[str, int, int], ...] = ()  # those (op, N, K) themselves

    @property
    def only_before(self) -> tuple[DispatchRow, ...]:
        return tuple(row for row in self.rows if row.after is None)

    @property
    def only_after(self) -> tuple[DispatchRow, ...]:
        return tuple(row for row in self.rows if row.before is None)

    def kernels_at(self, shape: tuple[int, int], m: int, *, after: bool) -> set[str]:
        return {
            kernel
            for row in self.rows
            if row.shape == shape and row.m == m
            for kernel in ((row.after if after else row.before) or "").split("|")
            if kernel
        }

    def to_findings(self) -> list[Finding]:
        rows = [
            Finding(
                FindingKind.DISPATCH,
                file="",
                name=SUMMARY_NAME,
                before=str(self.decisions_before),
                after=str(self.decisions_after),
                detail=f"unchanged_shapes={self.unchanged_shapes}",
            )
        ]
        rows += [
            Finding(FindingKind.DISPATCH, file="", name=op, key=f"N={n} K={k}", detail=UNCHANGED_DETAIL)
            for op, n, k in self.unchanged_keys
        ]
        for row in self.rows:
            rows.append(
                Finding(
                    FindingKind.DISPATCH,
                    file="",
                    name=row.op,
                    key=f"N={row.n} K={row.k} m={row.m}",
                    before=_side(row.before, row.reason_before),
                    after=_side(row.after, row.reason_after),
                    detail=f"count {row.count_before} -> {row.count_after}",
                )
            )
        return rows

    @classmethod
    def from_findings(cls, findings: Sequence[Finding]) -> DispatchDiff | None:
        mine = [f for f in findings if f.kind is FindingKind.DISPATCH]
        if not mine:
            return None
        rows: list[DispatchRow] = []
        unchanged_keys: list[tuple[str, int, int]] = []
        summary = (0, 0, 0)  # unchanged shapes, decisions before, decisions after
        for finding in mine:
            if finding.name == SUMMARY_NAME:
                unchanged = finding.detail.removeprefix("unchanged_shapes=")
                summary = (
                    int(unchanged) if unchanged.isdigit() else 0,
                    int(finding.before or 0),
                    int(finding.after or 0),
                )
            elif shape := _SHAPE.match(finding.key):
                unchanged_keys.append((finding.name, int(shape[1]), int(shape[2])))
            elif key := _KEY.match(finding.key):
                counts = [int(c) for c in re.findall(r"\d+", finding.detail)] if finding.detail else []
                before, reason_before = _parse_side(finding.before)
                after, reason_after = _parse_side(finding.after)
                n, k, m = int(key[1]), int(key[2]), int(key[3])
                count_before, count_after = counts if len(counts) == 2 else (0, 0)
                rows.append(
                    DispatchRow(
                        finding.name, n, k, m, before, after, reason_before, reason_after, count_before, count_after
                    )
                )
        return cls(tuple(rows), *summary, tuple(unchanged_keys))


def dispatch_diff(before: DispatchTrace | Path, after: DispatchTrace | Path) -> DispatchDiff:
    """Compare the last good run's trace (before) with the first bad run's (after)."""
    old = read_dispatch_trace(before) if isinstance(before, Path) else before
    new = read_dispatch_trace(after) if isinstance(after, Path) else after
    old_table, new_table = _table(old.decisions), _table(new.decisions)
    shapes = list(dict.fromkeys(k[:3] for k in [*old_table, *new_table]))
    rows: list[DispatchRow] = []
    unchanged: list[tuple[str, int, int]] = []
    for shape in shapes:
        keys = sorted({k for k in [*old_table, *new_table] if k[:3] == shape}, key=lambda k: k[3])
        shape_rows = [_row(key, old_table.get(key), new_table.get(key)) for key in keys]
        if any(row.changed for row in shape_rows):
            rows.extend(shape_rows)
        else:
            unchanged.append(shape)
    rows.sort(key=lambda row: (row.n, row.k, row.op, row.m))
    return DispatchDiff(tuple(rows), len(unchanged), len(old.decisions), len(new.decisions), tuple(unchanged))


_Key = tuple[str, int, int, int]


@dataclass
class _Cell:
    kernels: set[str]
    reasons: set[str]
    count: int


def _table(decisions: Iterable[Decision]) -> dict[_Key, _Cell]:
    table: dict[_Key, _Cell] = {}
    for decision in decisions:
        cell = table.setdefault((decision.op, decision.n, decision.k, decision.m), _Cell(set(), set(), 0))
        cell.kernels.add(decision.kernel)
        if decision.reason:
            cell.reasons.add(decision.reason)
        cell.count += decision.count
    return table


def _row(key: _Key, old: _Cell | None, new: _Cell | None) -> DispatchRow:
    op, n, k, m = key
    return DispatchRow(
        op, n, k, m,
        "|".join(sorted(old.kernels)) if old else None, "|".join(sorted(new.kernels)) if new else None,
        "|".join(sorted(old.reasons)) if old else "", "|".join(sorted(new.reasons)) if new else "",
        old.count if old else 0, new.count if new else 0,
    )  # fmt: skip


def _side(kernel: str | None, reason: str) -> str | None:
    if kernel is None:
        return None
    return f"{kernel} ({reason})" if reason else kernel


def _parse_side(text: str | None) -> tuple[str | None, str]:
    if text is None:
        return None, ""
    match = _SIDE.match(text)
    if match is None:
        return text, ""
    return match["kernel"], match["reason"] or ""
