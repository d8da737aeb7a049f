"""The dtypes a host function dispatches over with a type-dispatch macro (`AT_DISPATCH_FLOATING_TYPES_AND2(
at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "radius", [&] {...})`, `AT_DISPATCH_CASE(
at::kBFloat16, ...)`, a project's `VLLM_DISPATCH_FLOATING_TYPES`): the macro's name with the dtypes named in its
arguments. A hunk that changes them in a function the commit keeps (a dtype added or dropped: `_AND` -> `_AND2`
with BFloat16) is a dispatch-logic row of the function; the same macro and dtypes over another expression
(`x.type()` -> `x.scalar_type()`) or reformatted is no row, and a kernel's own code is its body."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_scope import defined_in, enclosing_function

MAX_ARGUMENT_LINES = 8  # a macro's dtype arguments spread over this many lines at most

_MACRO = re.compile(r"\b([A-Z][A-Z0-9_]*DISPATCH[A-Z0-9_]*)\s*\(")
_DTYPE_MACRO = re.compile(r"TYPE|FLOAT|HALF|BF16|FP16|FP8|INT8")
_DTYPE = re.compile(
    r"ScalarType::(\w+)|\b(?:at|torch|c10)::k([A-Z]\w*)\b|\bk(Half|BFloat16|Float|Double|Float16|Float8_\w+|Byte|"
    r"Char|Short|Int|Long|Bool|ComplexHalf|ComplexFloat|ComplexDouble|UInt\d+|Int\d+)\b"
)


def dtype_dispatch_rows(path: str, old_lines: list[str], new_lines: list[str], hunks: Iterable[Hunk]) -> list[Finding]:
    hunks = list(hunks)
    old = _dispatches(old_lines, [(h.old_lo, h.old_hi) for h in hunks])
    new = _dispatches(new_lines, [(h.new_lo, h.new_hi) for h in hunks])
    rows: list[Finding] = []
    for function in dict.fromkeys([*old, *new]):
        was, now = old.get(function, Counter()), new.get(function, Counter())
        if was == now or not (defined_in(function, old_lines) and defined_in(function, new_lines)):
            continue
        before, after = next(iter(was - now), None), next(iter(now - was), None)
        rows.append(
            Finding(
                FindingKind.DISPATCH_LOGIC,
                path,
                function,
                key="dtype dispatch",
                before=short_text(before) if before else None,
                after=short_text(after) if after else None,
                detail="the dtypes a type-dispatch macro instantiates the code for",
            )
        )
    return rows


def _dispatches(lines: list[str], ranges: list[tuple[int, int]]) -> dict[str, Counter[str]]:
    """Per host function: the dispatch macros (name and dtypes) on the lines of the ranges, or on the line above one
    (`AT_DISPATCH_ALL_TYPES_AND2(` whose dtypes a hunk adds on the next line)."""
    found: dict[str, Counter[str]] = {}
    seen: set[tuple[int, int]] = set()
    for lo, hi in ranges:
        for index in range(max(lo - 1, 0), min(hi, len(lines))):
            for match in _MACRO.finditer(lines[index]):
                if (index, match.start()) in seen:
                    continue
                seen.add((index, match.start()))
                key = _key(lines, index, match)
                scope = enclosing_function(lines, index) if key else None
                if scope is not None and not scope.device:
                    found.setdefault(scope.function, Counter())[key] += 1
    return found


def _key(lines: list[str], index: int, match: re.Match[str]) -> str:
    """`MACRO(dtype, ...)`: the macro with the dtypes its arguments name before the code it instantiates (a lambda
    or a block); '' for a macro that dispatches on no dtype."""
    text = lines[index][match.end() :]
    for more in lines[index + 1 : index + MAX_ARGUMENT_LINES]:
        if re.search(r"\[[&=]?\]|\{", text):
            break
        text += " " + more
    head = re.split(r"\[[&=]?\]|\{", text, maxsplit=1)[0]
    dtypes = sorted(next(group for group in found if group) for found in _DTYPE.findall(head))
    if not dtypes and not _DTYPE_MACRO.search(match[1]):
        return ""
    return f"{match[1]}({', '.join(dtypes)})"
