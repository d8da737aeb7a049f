"""C / C++ / CUDA branches a commit switches off or forces on by making their condition constant:

    if (dst->ne[1] >= 32) {          ->  if (false && dst->ne[1] >= 32) {       switched off
    if (use_graphs && ok) {          ->  if (true || use_graphs && ok) {         forced on
    if (cc >= CC_AMPERE) {           ->  if (0) {                                switched off

The path the branch guarded (a kernel, a fallback, a graph mode) no longer runs, or always does: a branch-condition
row named by the host function it is in (a kernel's own branches are its body).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_scope import enclosing_function

_CONDITION = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|while)\s*\(\s*(?P<condition>.*?)\)?\s*\{?\s*$")
_OFF = re.compile(r"^(?:false|0)\s*(?:&&|\)\s*$|$)")
_ON = re.compile(r"^(?:true|1)\s*(?:\|\||\)\s*$|$)")


def switched_branch_rows(path: str, old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk]) -> list[Finding]:
    """A row for each condition line of a hunk whose new text is the old one made constant (paired in order)."""
    rows: list[Finding] = []
    for hunk in hunks:
        removed = [i for i in range(hunk.old_lo, min(hunk.old_hi, len(old_lines))) if _CONDITION.match(old_lines[i])]
        added = [i for i in range(hunk.new_lo, min(hunk.new_hi, len(new_lines))) if _CONDITION.match(new_lines[i])]
        for old, new in zip(removed, added, strict=False):
            state = _switch(_condition(old_lines[old]), _condition(new_lines[new]))
            scope = enclosing_function(new_lines, new) if state else None
            if scope is None or scope.device:
                continue
            rows.append(
                Finding(
                    FindingKind.BRANCH_CONDITION,
                    path,
                    scope.function,
                    key=f"branch {state}",
                    before=" ".join(old_lines[old].split()),
                    after=" ".join(new_lines[new].split()),
                    line=new + 1,
                )
            )
    return rows


def _condition(line: str) -> str:
    match = _CONDITION.match(line)
    return " ".join(match["condition"].split()) if match else ""


def _switch(old: str, new: str) -> str:
    """'switched off', 'forced on' or '' (the new condition is not the old one made constant)."""
    if old == new or _OFF.match(old) or _ON.match(old):
        return ""
    if _OFF.match(new) and (new.split("&&", 1)[-1].strip() == old or "&&" not in new):
        return "switched off"
    if _ON.match(new) and (new.split("||", 1)[-1].strip() == old or "||" not in new):
        return "forced on"
    return ""
