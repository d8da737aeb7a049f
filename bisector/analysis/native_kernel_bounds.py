"""A kernel's `__launch_bounds__(max threads[, min blocks])`: the register budget the compiler fits it to. A
commit that adds, drops or changes the bounds of a kernel both versions of the file define is a launch-parameter
row named by the kernel (`__launch_bounds__(1024)` put on Conv1D); a new kernel's bounds are new code."""

from __future__ import annotations

import re
from collections import Counter

from bisector.analysis.findings import Finding, FindingKind

MAX_HEAD_CHARS = 400  # from the bounds to the kernel's name and `(`

_BOUNDS = re.compile(r"__launch_bounds__\s*\(((?:[^()]|\([^()]*\))*)\)")
_KERNEL_NAME = re.compile(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>\s*)?\(")
_QUALIFIERS = frozenset({"__global__", "__device__", "__host__", "__attribute__", "__launch_bounds__", "alignas"})


def kernel_bound_rows(path: str, old_text: str, new_text: str) -> list[Finding]:
    """Rows for the kernels whose launch bounds differ (the comment-stripped texts of the file's versions)."""
    if "__launch_bounds__" not in old_text and "__launch_bounds__" not in new_text:
        return []
    old, new = _bounds(old_text), _bounds(new_text)
    rows = []
    for kernel in dict.fromkeys([*old, *new]):
        was, now = old.get(kernel, Counter()), new.get(kernel, Counter())
        if was == now or not (_defined(kernel, old_text) and _defined(kernel, new_text)):
            continue
        rows.append(
            Finding(
                FindingKind.LAUNCH_PARAM,
                path,
                kernel,
                key="launch bounds",
                before=", ".join(f"__launch_bounds__({b})" for b in sorted(was)) or None,
                after=", ".join(f"__launch_bounds__({b})" for b in sorted(now)) or None,
                detail="the threads per block (and blocks per SM) the compiler fits the kernel's registers to",
            )
        )
    return rows


def _bounds(text: str) -> dict[str, Counter[str]]:
    found: dict[str, Counter[str]] = {}
    for match in _BOUNDS.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if text[line_start : match.start()].lstrip().startswith("#"):
            continue  # a macro that spells the bounds: its uses are compared where they are
        after = _BOUNDS.sub(" ", text[match.end() : match.end() + MAX_HEAD_CHARS])
        name = next((m[1] for m in _KERNEL_NAME.finditer(after) if m[1] not in _QUALIFIERS), None)
        if name is not None:
            found.setdefault(name, Counter())[" ".join(match[1].split())] += 1
    return found


def _defined(kernel: str, text: str) -> bool:
    return re.search(rf"\b{re.escape(kernel)}\s*(?:<[^;{{}}()]*>\s*)?\(", text) is not None
