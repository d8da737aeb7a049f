"""The launch shape of a C / C++ / CUDA launch site: a grid or block built with dim3 (`dim3 grid(b, s_q, h);`,
`dim3(params.b * params.s_q, 1, h)` passed to a launch), a `<<<grid, block, smem>>>` configuration, a work-group
size set on a compute pipeline (Vulkan / OpenCL hosts: `pipeline->set_optimal_local_size_xyz(64, 1, channels);`), or
an assignment to a grid-, blocks- or CTA-count name (`blocks_per_act_slice = max(blocks_per_act_slice, 1);`) that a
hunk changes in host code is a launch-parameter row named by the host function (a kernel's own use of them is its
body). A line removed and added with the same text only moved; a launch of the same kernel with the same `<<<...>>>`
passes other data, no other shape."""

from __future__ import annotations

import re
from collections.abc import Iterable, Set

from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.native_scope import enclosing_function
from bisector.vocab.gitdiff import Hunk, line_text, unmoved

_SHAPE = re.compile(
    r"\bdim3\b\s*(?:[A-Za-z_]\w*\s*)?[({]|<<<|"
    # a plain assignment to a launch-shape name: blocks_per_act_slice = max(blocks_per_act_slice, 1);
    r"^\s*(?:(?:int|unsigned|size_t|int64_t|uint32_t|auto)\s+)?"
    r"(?i:[a-z_]*(?:grid|blocks|ctas?_per|num_ctas|threads_per)\w*)\s*[+\-*/]?=[^=]|"
    # a compute pipeline's work-group size set for its dispatches: pipeline->set_optimal_local_size_xyz(64, 1, c);
    r"\bset_\w*(?:local_size|work_?group_size)\w*\s*\("
)


_LAUNCH = re.compile(r"[A-Za-z_][\w:]*\s*(?:<[^<>;]*>)?\s*<<<.*?>>>")  # kernel<T, 4><<<grid, block, smem>>>


def launch_shape_rows(
    path: str, old_lines: list[str], new_lines: list[str], hunks: Iterable[Hunk], rowed: Set[int | None]
) -> list[Finding]:
    """The launch-shape rows of the hunks, but for lines another row of the file shows already (rowed: their
    numbers)."""
    rows: list[Finding] = []
    for hunk in hunks:
        removed = [i for i in range(hunk.old_lo, min(hunk.old_hi, len(old_lines))) if _SHAPE.search(old_lines[i])]
        added = [i for i in range(hunk.new_lo, min(hunk.new_hi, len(new_lines))) if _SHAPE.search(new_lines[i])]
        removed, added = unmoved(removed, added, old_lines, new_lines)
        changed = old_lines[hunk.old_lo : hunk.old_hi] + new_lines[hunk.new_lo : hunk.new_hi]
        for old, new in _paired(removed, added, old_lines, new_lines):
            lines, index = (new_lines, new) if new is not None else (old_lines, old if old is not None else 0)
            scope = enclosing_function(lines, index)
            if (
                scope is None
                or scope.device
                or index + 1 in rowed
                or _same_configuration(old, new, old_lines, new_lines, changed)
            ):
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


def _same_configuration(
    old: int | None, new: int | None, old_lines: list[str], new_lines: list[str], changed: list[str]
) -> bool:
    """Two launch lines of the same kernel and `<<<...>>>` none of whose names the hunk (changed: its removed and
    added lines) assigns: only the kernel's arguments (its data) differ."""
    if old is None or new is None:
        return False
    was, now = _LAUNCH.search(line_text(old_lines[old])), _LAUNCH.search(line_text(new_lines[new]))
    if was is None or now is None or was[0] != now[0]:
        return False
    names = set(re.findall(r"[A-Za-z_]\w*", was[0].split("<<<", 1)[1]))
    return not any(re.search(rf"\b{name}\s*[+\-*/]?=(?!=)", line) for name in names for line in changed)


def _paired(
    removed: list[int], added: list[int], old_lines: list[str], new_lines: list[str]
) -> list[tuple[int | None, int | None]]:
    """Removed and added lines paired by what they set (the name assigned, dim3's variable, <<<), in order; a line
    with no counterpart is paired with None."""
    pairs: list[tuple[int | None, int | None]] = []
    left = list(added)
    for old in removed:
        key = _key(old_lines[old])
        match = next((new for new in left if _key(new_lines[new]) == key), None)
        if match is not None:
            left.remove(match)
        pairs.append((old, match))
    return pairs + [(None, new) for new in left]


def _key(line: str) -> str:
    if "<<<" in line:
        return "<<<"
    declared = re.search(r"\bdim3\s+([A-Za-z_]\w*)", line)
    if declared is not None:
        return declared[1]
    assigned = re.match(r"\s*(?:\w+\s+)?([A-Za-z_]\w*)\s*[+\-*/]?=", line)
    return assigned[1] if assigned is not None else line.strip()
