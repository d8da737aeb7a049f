"""Call traces of the functions the static diff names, for any Python stack, and the diff of two of them.

traced_functions(static) picks the functions a culprit changes that choose dispatch ("ops/gemm.py:pick_config");
call_trace_env(FILE, targets) injects hook/sitecustomize.py, which wraps them by qualified name when their module
is imported and appends each distinct {"function", "args", "result"} to FILE. call_trace_diff compares the
last good run's trace with the first bad run's, per (function, arguments): the seed table of any repository.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bisector.analysis.file_roles import is_test_path
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.kernel_trace import HOOK_DIR
from bisector.analysis.static_diff import StaticDiff

CALL_TRACE_ENV = "BISECT_CALL_TRACE"
TRACE_FUNCTIONS_ENV = "BISECT_TRACE_FUNCTIONS"
MAX_TARGETS = 40
SUMMARY_NAME = "(summary)"
_IN_FUNCTION = re.compile(r"^in ([\w.]+)")
_TRACED_KINDS = (FindingKind.DISPATCH_LOGIC, FindingKind.BRANCH_CONDITION, FindingKind.LAUNCH_PARAM)


def traced_functions(static: StaticDiff | None) -> list[str]:
    """ "path.py:Qual.name" of each function (outside tests, not nested) whose dispatch the culprit changes and
    that exists after it: the functions that read changed tables, hold changed conditions or launch changed
    kernels. At most MAX_TARGETS, in the order of the diff."""
    if static is None:
        return []
    targets = (traced_function(finding) for finding in static.findings)
    return list(dict.fromkeys(target for target in targets if target))[:MAX_TARGETS]


def traced_function(finding: Finding) -> str | None:
    """ "path.py:Qual.name" of the function a static row names, where the traced re-runs can wrap it: the
    function that reads a changed table, holds a changed condition or launches a changed kernel."""
    if finding.kind not in _TRACED_KINDS or not finding.file.endswith(".py") or is_test_path(finding.file):
        return None
    if finding.kind is FindingKind.LAUNCH_PARAM:
        match = _IN_FUNCTION.match(finding.detail)
        function = match[1] if match else ""
    else:
        function = finding.name if finding.after is not None else ""
    return f"{finding.file}:{function}" if function and "<" not in function else None


def is_recorded_name(target: str, function: str) -> bool:
    """Whether a traced function as recorded ("pkg.ops:pick", its module as imported) is the target
    ("src/pkg/ops.py:pick"): the same qualified name, and the target's path ends with the module's own path."""
    path, _, qualname = target.rpartition(":")
    module, _, recorded = function.rpartition(":")
    if recorded != qualname or not module:
        return False
    dotted = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return dotted == module or dotted.endswith(f".{module}")


def call_trace_env(out_file: Path, targets: Sequence[str], base_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables to add to a run's environment: PYTHONPATH with the hook first, the trace file, the targets."""
    existing = (os.environ if base_env is None else base_env).get("PYTHONPATH", "")
    parts = [p for p in existing.split(os.pathsep) if p and p != str(HOOK_DIR)]
    return {
        "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), *parts]),
        CALL_TRACE_ENV: str(out_file),
        TRACE_FUNCTIONS_ENV: ";".join(targets),
    }


@dataclass(frozen=True)
class Call:
    function: str  # "pkg.ops:pick_config" (the module as imported)
    args: str
    result: str


def read_call_trace(path: Path) -> list[Call]:
    """The distinct calls a run recorded; a missing file (nothing traced was called) is an empty trace."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    calls: list[Call] = []
    for line in lines:
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if isinstance(raw, dict) and "function" in raw:
            calls.append(Call(str(raw["function"]), str(raw.get("args", "")), str(raw.get("result", ""))))
    return calls


@dataclass(frozen=True)
class CallRow:
    function: str
    args: str
    before: str | None  # results at last good, " | "-joined when several; None: not called with these args
    after: str | None


@dataclass(frozen=True)
class CallTraceDiff:
    rows: tuple[CallRow, ...]  # the calls whose result differs (or that happen on one side only)
    unchanged: int  # calls with the same result on both sides
    functions: tuple[str, ...] = ()  # what was traced
    unchanged_by_function: tuple[tuple[str, int], ...] = ()  # (recorded function, its calls with the same result)

    def to_findings(self) -> list[Finding]:
        same = ";".join(f"{function}={count}" for function, count in self.unchanged_by_function)
        summary = Finding(
            FindingKind.TRACED_CALL, "", SUMMARY_NAME, detail=f"unchanged={self.unchanged}",
            before=";".join(self.functions), after=same or None,
        )  # fmt: skip
        rows = [Finding(FindingKind.TRACED_CALL, "", r.function, r.args, r.before, r.after) for r in self.rows]
        return [summary, *rows]

    @classmethod
    def from_findings(cls, findings: Sequence[Finding]) -> CallTraceDiff | None:
        mine = [f for f in findings if f.kind is FindingKind.TRACED_CALL]
        summary = next((f for f in mine if f.name == SUMMARY_NAME), None)
        if summary is None:
            return None
        unchanged = summary.detail.removeprefix("unchanged=")
        rows = tuple(CallRow(f.name, f.key, f.before, f.after) for f in mine if f is not summary)
        functions = tuple(t for t in (summary.before or "").split(";") if t)
        counts = (part.rpartition("=") for part in (summary.after or "").split(";") if part)
        same = tuple((function, int(count)) for function, _, count in counts if count.isdigit())
        return cls(rows, int(unchanged) if unchanged.isdigit() else 0, functions, same)


def call_trace_diff(before: Iterable[Call], after: Iterable[Call], functions: Sequence[str] = ()) -> CallTraceDiff:
    old, new = _results(before), _results(after)
    rows: list[CallRow] = []
    same: dict[str, int] = {}
    for key in [*old, *(k for k in new if k not in old)]:
        was, now = old.get(key), new.get(key)
        if was == now:
            same[key[0]] = same.get(key[0], 0) + 1
            continue
        rows.append(CallRow(key[0], key[1], _joined(was), _joined(now)))
    return CallTraceDiff(tuple(rows), sum(same.values()), tuple(functions), tuple(same.items()))


def _joined(results: list[str] | None) -> str | None:
    return None if results is None else " | ".join(results)


def _results(calls: Iterable[Call]) -> dict[tuple[str, str], list[str]]:
    results: dict[tuple[str, str], list[str]] = {}
    for call in calls:
        seen = results.setdefault((call.function, call.args), [])
        if call.result not in seen:
            seen.append(call.result)
    return {key: sorted(values) for key, values in results.items()}
