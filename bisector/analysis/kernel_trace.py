"""Generic GPU kernel trace for any unmodified PyTorch program, and the diff of two such traces.

kernel_trace_env(FILE) gives the environment that injects hook/sitecustomize.py: each Python process of the
test that imports torch appends {"pid", "argv", "device": "cuda"|"cpu", "kernels": {name: count}} to FILE at
exit (CPU ops when CUDA is unavailable). A profiler keeps every event until it stops, so the hook stops, counts
and restarts it every $BISECT_KERNEL_TRACE_DRAIN_S seconds (default 2): memory is one period's events, not the
run's (benchmarks/bench_kernel_trace_memory.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bisector.analysis.findings import Finding, FindingKind

TRACE_ENV = "BISECT_KERNEL_TRACE"
HOOK_DIR = Path(__file__).resolve().with_name("hook")
SUMMARY_NAME = "(summary)"


def kernel_trace_env(out_file: Path, base_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables to add to a step's environment: PYTHONPATH with the hook first, and the trace file."""
    existing = (os.environ if base_env is None else base_env).get("PYTHONPATH", "")
    path = os.pathsep.join([str(HOOK_DIR), existing]) if existing else str(HOOK_DIR)
    return {"PYTHONPATH": path, TRACE_ENV: str(out_file)}


@dataclass(frozen=True)
class KernelTrace:
    counts: dict[str, int] = field(default_factory=dict)  # summed over the processes
    processes: int = 0
    devices: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


def read_kernel_trace(path: Path) -> KernelTrace:
    """The trace a run left (empty when no process of it imported torch)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return KernelTrace()
    counts: dict[str, int] = {}
    processes, devices, errors = 0, [], []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if "error" in record:
            errors.append(str(record["error"]))
            continue
        kernels = record.get("kernels")
        if not isinstance(kernels, dict):
            continue
        processes += 1
        devices.append(str(record.get("device", "")))
        for name, count in kernels.items():
            counts[str(name)] = counts.get(str(name), 0) + (int(count) if isinstance(count, int) else 0)
    return KernelTrace(counts, processes, tuple(dict.fromkeys(devices)), tuple(errors))


@dataclass(frozen=True)
class KernelLaunchRow:
    name: str
    before: int  # launches in the last good run (0: none)
    after: int  # launches in the first bad run


@dataclass(frozen=True)
class KernelTraceDiff:
    rows: tuple[KernelLaunchRow, ...]  # kernels whose count differs, only-in-one-run first
    unchanged: int = 0  # kernels launched equally often in both runs
    devices: tuple[str, ...] = ()
    unchanged_rows: tuple[KernelLaunchRow, ...] = ()  # those kernels (none in explanations stored before these)

    @property
    def only_before(self) -> tuple[KernelLaunchRow, ...]:
        return tuple(row for row in self.rows if row.after == 0)

    @property
    def only_after(self) -> tuple[KernelLaunchRow, ...]:
        return tuple(row for row in self.rows if row.before == 0)

    @property
    def count_changed(self) -> tuple[KernelLaunchRow, ...]:
        return tuple(row for row in self.rows if row.before and row.after)

    def launches(self, function: str) -> KernelLaunchRow | None:
        """The launches of the Triton kernel compiled from a function of this name: named after it (Triton before
        2.1 added its signature: `_fwd_kernel_0d1d2d3de`); never a C++ kernel of the same name (`void
        at::native::add<float>(...)` is no Triton `add`). None when neither run launched it."""
        pattern = re.compile(rf"{re.escape(function)}(?:_(?:\d+[de]+)+)?")
        return next((row for row in (*self.rows, *self.unchanged_rows) if pattern.fullmatch(row.name)), None)

    def to_findings(self) -> list[Finding]:
        summary = Finding(
            FindingKind.KERNEL_LAUNCH,
            file="",
            name=SUMMARY_NAME,
            detail=f"unchanged={self.unchanged} devices={','.join(self.devices)}",
        )
        return [summary] + [
            Finding(
                FindingKind.KERNEL_LAUNCH,
                file="",
                name=row.name,
                before=str(row.before) if row.before else None,
                after=str(row.after) if row.after else None,
            )
            for row in (*self.rows, *self.unchanged_rows)
        ]

    @classmethod
    def from_findings(cls, findings: Sequence[Finding]) -> KernelTraceDiff | None:
        mine = [f for f in findings if f.kind is FindingKind.KERNEL_LAUNCH]
        if not mine:
            return None
        rows: list[KernelLaunchRow] = []
        unchanged = 0
        devices: tuple[str, ...] = ()
        for finding in mine:
            if finding.name == SUMMARY_NAME:
                fields = dict(part.split("=", 1) for part in finding.detail.split() if "=" in part)
                unchanged = int(fields.get("unchanged", "0") or 0)
                devices = tuple(d for d in fields.get("devices", "").split(",") if d)
                continue
            rows.append(KernelLaunchRow(finding.name, int(finding.before or 0), int(finding.after or 0)))
        changed = tuple(row for row in rows if row.before != row.after)
        return cls(changed, unchanged, devices, tuple(row for row in rows if row.before == row.after))


def kernel_trace_diff(before: KernelTrace | Path, after: KernelTrace | Path) -> KernelTraceDiff:
    old = read_kernel_trace(before) if isinstance(before, Path) else before
    new = read_kernel_trace(after) if isinstance(after, Path) else after
    names = list(dict.fromkeys([*old.counts, *new.counts]))
    rows = [KernelLaunchRow(n, old.counts.get(n, 0), new.counts.get(n, 0)) for n in names]
    changed = [row for row in rows if row.before != row.after]
    changed.sort(key=lambda row: (bool(row.before and row.after), -abs(row.after - row.before), row.name))
    same = tuple(row for row in rows if row.before == row.after)
    return KernelTraceDiff(tuple(changed), len(same), tuple(dict.fromkeys(old.devices + new.devices)), same)
