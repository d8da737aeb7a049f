"""The launch shape of a C / C++ / CUDA launch site: a grid or block built with dim3 (`dim3 grid(b, s_q, h);`,
`dim3(params.b * params.s_q, 1, h)` passed to a launch) or a `<<<grid, block, smem>>>` configuration that a hunk
changes in host code is a launch-parameter row named by the host function (a kernel's own use of dim3 is its
body). A line removed and added with the same text only moved."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_scope import enclosing_function

_SHAPE = re.compile(r"\bdim3\b\s*(?:[A-Za-z_]\w*\s*)?[({]|<<<")


def launch_shape_rows(path: str, old_lines: list[str], new_lines: list[str], hunks: Iterable[Hunk]) -> list[Finding]:
    rows: list[Finding] = []
    for hunk in hunks:
        removed = [i for i in range(hunk.old_lo, min(hunk.old_hi, len(old_lines))) if _SHAPE.search(old_lines[i])]
        added = [i for i in range(hunk.new_lo, min(hunk.new_hi, len(new_lines))) if _SHAPE.search(new_lines[i])]
        moved = Counter(_text(old_lines[i]) for i in removed) & Counter(_text(new_lines[i]) for i in added)
        removed, added = _unmoved(removed, old_lines, moved), _unmoved(added, new_lines, moved)
        for position in range(max(len(removed), len(added))):
            old = removed[position] if position < len(removed) else None
            new = added[position] if position < len(added) else None
            lines, index = (new_lines, new) if new is not None else (old_lines, old if old is not None else 0)
            scope = enclosing_function(lines, index)
            if scope is None or scope.device:
                continue
            rows.append(
                Finding(
                    FindingKind.LAUNCH_PARAM,
                    path,
                    scope.function,
                    "launch shape",
                    short_text(old_lines[old]) if old is not None else None,
                    short_text(new_lines[new]) if new is not None else None,
                    index + 1,
                    "grid / block of a launch in C / C++",
                )
            )
    return rows


def _text(line: str) -> str:
    return " ".join(line.split())


def _unmoved(found: list[int], lines: list[str], moved: Counter[str]) -> list[int]:
    left = Counter(moved)
    kept = []
    for index in found:
        if left[_text(lines[index])] > 0:
            left[_text(lines[index])] -= 1
        else:
            kept.append(index)
    return kept
