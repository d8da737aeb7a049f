"""A source file compiled only under a macro: an `#if` / `#ifdef` that opens before any code of a `.cu` / `.cpp`
file and whose `#endif` closes it (`#ifdef PPLNN_CUDA_ENABLE_CUDNN` around a file of cuDNN kernels). A commit that
puts a file under such a gate, takes it out, or changes the gate decides whether the file's kernels are built at all:
a branch-condition row named by the gate. Headers are left out (an include guard, `#pragma once` style, is no gate;
a header's declarations are compiled where it is included)."""

from __future__ import annotations

import re

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.native_directives import PP_END

SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".cu")

_OPEN = re.compile(r"^\s*#\s*if(?:n?def)?\b")
_INCLUDE_GUARD = re.compile(r"^\s*#\s*ifndef\s+(\w+)")


def file_gate_rows(path: str, old_lines: list[str], new_lines: list[str]) -> list[Finding]:
    if not path.lower().endswith(SOURCE_SUFFIXES):
        return []
    old, new = _gate(old_lines), _gate(new_lines)
    if old == new or not (old_lines and new_lines):
        return []
    return [
        Finding(
            FindingKind.BRANCH_CONDITION,
            path,
            new or old or "",
            key="whole-file gate",
            before=old,
            after=new,
            detail="the file's code is compiled only under this condition",
        )
    ]


def _gate(lines: list[str]) -> str | None:
    """The condition around all of the file's code, or None."""
    code = [(index, line) for index, line in enumerate(lines) if line.strip()]
    if len(code) < 3 or not _OPEN.match(code[0][1]) or not PP_END.match(code[-1][1]):
        return None
    guard = _INCLUDE_GUARD.match(code[0][1])
    if guard is not None and re.match(rf"^\s*#\s*define\s+{guard[1]}\b", code[1][1]):
        return None
    depth = 0
    for _, line in code[:-1]:
        depth += 1 if _OPEN.match(line) else -1 if PP_END.match(line) else 0
        if depth == 0:
            return None  # the first block closes before the end: not around the whole file
    return " ".join(code[0][1].split())
