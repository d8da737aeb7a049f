"""C / C++ / CUDA branches a commit switches off or forces on by making their condition constant:

    if (dst->ne[1] >= 32) {          ->  if (false && dst->ne[1] >= 32) {       switched off
    if (use_graphs && ok) {          ->  if (true || use_graphs && ok) {         forced on
    if (cc >= CC_AMPERE) {           ->  if (0) {                                switched off

The path the branch guarded (a kernel, a fallback, a graph mode) no longer runs, or always does: a branch-condition
row named by the host function it is in (a kernel's own branches are its body). So is code a commit cuts off, or
lets run again, without a condition: an `#if 0` added around it or removed, an unconditional `return` put before
it or taken away (`return 0.0f;` above the timing that picks an algorithm), or a refusal turned into a fallback or
back (`throw std::runtime_error("Not support this kind of GPU!");` -> `return "";`), in a function both versions
have.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_directives import IF_ZERO
from bisector.analysis.native_scope import defined_in, enclosing_function

_CONDITION = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|while)\s*\(\s*(?P<condition>.*?)\)?\s*\{?\s*$")
_OFF = re.compile(r"^(?:false|0)\s*(?:&&|\)\s*$|$)")
_ON = re.compile(r"^(?:true|1)\s*(?:\|\||\)\s*$|$)")


def switched_branch_rows(path: str, old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk]) -> list[Finding]:
    """A row for each condition line of a hunk whose new text is the old one made constant (paired in order), and
    one for each function whose code an `#if 0` or a `return` cuts off or lets run again (dead_code_rows)."""
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
    named = {row.name for row in rows}
    return rows + [row for row in dead_code_rows(path, old_lines, new_lines, hunks) if row.name not in named]


def dead_code_rows(path: str, old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk]) -> list[Finding]:
    """A row per host function in which a hunk adds or removes an `#if 0` or an unconditional `return` that code
    follows in its block (a line removed and added with the same text only moved), or replaces its one `throw` with
    one `return` or back."""
    rows: dict[str, Finding] = {}
    for hunk in hunks:
        removed = {i: " ".join(old_lines[i].split()) for i in range(hunk.old_lo, min(hunk.old_hi, len(old_lines)))}
        added = {i: " ".join(new_lines[i].split()) for i in range(hunk.new_lo, min(hunk.new_hi, len(new_lines)))}
        moved = set(removed.values()) & set(added.values())
        for lines, other, changed, state in (
            (new_lines, old_lines, added, "cut off"),
            (old_lines, new_lines, removed, "let run again"),
        ):
            refusals = _refusals_turned(removed, added) if state == "cut off" else {}
            for index, text in changed.items():
                if text in moved or not (_cuts_off(lines, index) or index in refusals):
                    continue
                scope = enclosing_function(lines, index)
                if scope is None or scope.device or scope.function in rows or not defined_in(scope.function, other):
                    continue
                before = next(iter(removed.values())) if index in refusals else None if state == "cut off" else text
                rows[scope.function] = Finding(
                    FindingKind.BRANCH_CONDITION,
                    path,
                    scope.function,
                    key=refusals.get(index, f"code {state}"),
                    before=before,
                    after=text if state == "cut off" else None,
                    line=index + 1,
                    detail="an #if 0, a return or a throw decides whether the code after it runs",
                )
    return list(rows.values())


def _refusals_turned(removed: dict[int, str], added: dict[int, str]) -> dict[int, str]:
    """The added line of a hunk that replaces one `throw` with one `return` ('a refusal turned into a fallback') or
    one `return` with one `throw` ('a fallback turned into a refusal'), by its index."""
    if len(removed) != 1 or len(added) != 1:
        return {}
    (old,), ((index, new),) = removed.values(), added.items()
    if _THROW.match(old) and _RETURN.match(new):
        return {index: "a refusal turned into a fallback"}
    if _RETURN.match(old) and _THROW.match(new):
        return {index: "a fallback turned into a refusal"}
    return {}


def _cuts_off(lines: list[str], index: int) -> bool:
    """Line index is an `#if 0`, or a `return` no condition guards that code follows in the same block."""
    if IF_ZERO.match(lines[index]):
        return True
    if not _RETURN.match(lines[index]):
        return False
    above = next((text.strip() for text in reversed(lines[max(index - 3, 0) : index]) if text.strip()), "")
    below = next((text.strip() for text in lines[index + 1 : index + 4] if text.strip()), "}")
    guarded = not above.endswith((";", "{", "}")) or _CASE_LABEL.match(above) is not None
    return not guarded and not below.startswith(("}", "#", "case ", "default")) and _CASE_LABEL.match(below) is None


_RETURN = re.compile(r"^\s*return\b[^;{}]*;\s*$")
_THROW = re.compile(r"^\s*throw\b[^;{}]*;\s*$")
_CASE_LABEL = re.compile(r"^(?:case\b.*|default\s*):\s*$|^\w+\s*:\s*$")


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
