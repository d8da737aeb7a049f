"""Arches a Python function picks without a branch: an arch clamped to a bound and a list of compile targets,

    arch = min(arch, 90)                                   (a library without heuristics past SM90)
    gencode_opts = ["-gencode=arch=compute_75,code=compute_75"]
    clang_arch_flags += ["--cuda-gpu-arch=sm_75"]

    parser.add_argument("-a", "--architecture", default="gfx906;gfx1030;gfx1100")     (a build script's default)
    cuda_archs = ";".join(("75-real", "90a-real", "120-virtual"))      (CMake's CUDA_ARCHITECTURES, an arch list)

A string of targets (`;`-, `,`- or space-separated) counts where it is a keyword argument, and CMake's arches
(`90a-real`) in a list or tuple assigned to an arch list's name. A changed clamp moves which arch's code a device
gets; a changed target list moves which arches a build has code for. Neither is an if, so the condition rows do
not see them. A branch_condition row for a function (or module) whose arch clamps differ, and a table_entry row
for one whose arch target strings differ, each named like the other Python rows (`Class.method`,
`outer.<locals>.inner`, `<module>` for module level); a function added or removed is
new or dropped code and gets none.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from bisector.analysis.changed_statements import MODULE, changed_statements, top_name
from bisector.analysis.code_shape import ParsedSource, statement_blocks
from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.word_lines import holds_match

_ARCH_NAME = re.compile(r"(?:^|_)(?:arch|archs|cc|sm|capability|compute_capability)$", re.I)
_TARGET = re.compile(r"\b(?:compute|sm)_\d{2,3}[a-z]?\b|\bgfx\d{3,4}[a-z]?\b")
_ARCH_LIST_TEXT = re.compile(r"(?i)arch(?:s|_?list|itectures?)\b")
_ARCH_LIST_LOWERED = re.compile(r"arch(?:s|_?list|itectures?)\b")  # _ARCH_LIST_TEXT in lowered text: a literal prefix
_SEPARATORS = re.compile(r"[;,\s]+")
_BARE_TARGET = re.compile(r"^(?:(?:compute|sm)_\d{2,3}[a-z]?|gfx\d{3,4}[a-z]?)(?::[\w+-]+)*$")  # gfx90a:xnack-
_CMAKE_ARCH = re.compile(r"^\d{2,3}[af]?(?:-real|-virtual)?$")  # CMake's CUDA_ARCHITECTURES: 90a-real, 120-virtual
_CLAMP_TEXT = re.compile(r"(?i)(?:arch|archs|cc|sm|capability)\s*=\s*(?:min|max)\(")
# What a line needs for a target string in it: a target's letters, or a quote before a version-like arch ("8.0;9.0")
# or a CMake arch ("90a-real").
_TARGET_LETTERS = ("sm_", "compute_", "gfx")
_QUOTED_VERSION = re.compile(r"[\"'](?:[;,\s]*\d{1,2}\.\d|\d{2,3}[af]?(?:-real|-virtual)?[\"'])")


def arch_target_rows(path: str, before: ParsedSource | None, after: ParsedSource | None) -> list[Finding]:
    """A branch_condition row per scope whose arch clamps differ, a table_entry row per scope whose targets differ."""
    if before is None or after is None:
        return []
    # only the changed top-level statements whose source could hold a clamp or a target, on either side, are walked
    wanted = _candidates(before, after) | _candidates(after, before)
    if not wanted:
        return []
    old, new = _scopes(before, wanted), _scopes(after, wanted)
    rows = []
    for scope in sorted(old.keys() & new.keys()):
        (was_clamps, was_targets, _), (clamps, targets, line) = old[scope], new[scope]
        if was_clamps != clamps:
            rows.append(arch_row(FindingKind.BRANCH_CONDITION, path, scope, "arch clamp", was_clamps, clamps, line))
        if was_targets != targets:
            rows.append(arch_row(FindingKind.TABLE_ENTRY, path, scope, "arch targets", was_targets, targets, line))
    return rows


def arch_row(kind: FindingKind, path: str, scope: str, key: str, old: list[str], new: list[str], line: int) -> Finding:
    """A branch_condition row (arch clamps) or a table_entry row (arch targets) that shows what only one side has (the
    rest of a long target list is the same on both)."""
    clamp = kind is FindingKind.BRANCH_CONDITION
    detail = "an arch clamped without a branch" if clamp else "the arches a build targets"
    was, now = only_in(old, new), only_in(new, old)
    return Finding(
        kind,
        path,
        scope,
        key=key,
        before=short_text("; ".join(was)) if was else None,
        after=short_text("; ".join(now)) if now else None,
        line=line,
        detail=detail,
    )


def only_in(items: list[str], other: list[str]) -> list[str]:
    """The items other lacks, counted as a multiset (a target listed twice and kept once is one only here)."""
    remaining = list(other)
    only = []
    for item in items:
        if item in remaining:
            remaining.remove(item)
        else:
            only.append(item)
    return only


def _candidates(module: ParsedSource, other: ParsedSource) -> set[str]:
    """The top-level names (a def's or class's, `<module>` for other statements) whose source changed and has a
    target string, an arch list's name or an arch name next to min( or max(."""
    return {top_name(statement) for statement, text in changed_statements(module, other) if _may_choose_arch(text)}


def _may_choose_arch(text: str) -> bool:
    """A target string, an arch list's name or a clamp in the text; each regex runs only where the letters it
    needs are there (a whole class's text is long, and most hold none)."""
    lowered = text.lower()
    return (
        holds_match(text, _TARGET_LETTERS, _TARGET)
        or holds_match(lowered, ("arch",), _ARCH_LIST_LOWERED)
        or holds_match(lowered, ("min(", "max("), _CLAMP_TEXT)
    )


def _scopes(module: ParsedSource, wanted: set[str]) -> dict[str, tuple[list[str], list[str], int]]:
    """scope name -> (sorted clamp texts, sorted target strings, first line) of every scope in the wanted top-level
    statements, either list maybe empty."""
    found: dict[str, tuple[list[str], list[str], int]] = {}
    body = [statement for statement in module.tree.body if top_name(statement) in wanted]
    may_hold_targets = _may_hold_targets(module.lines) if module.numbered else lambda statement: True
    for scope, statements, line in _walk_scopes(body, "", 1):
        clamps, targets = _own_choices(statements, may_hold_targets)
        found[scope or MODULE] = (sorted(clamps), sorted(targets), line)
    return found


def _may_hold_targets(lines: list[str]) -> Callable[[ast.stmt], bool]:
    """Whether a statement's own lines (its header, for an if, for, with...) could hold a target string: a
    statement none of whose lines does has no target to walk its expressions for (most of a large module's)."""

    def holds(statement: ast.stmt) -> bool:
        first = statement.lineno
        bodies = [field[0].lineno for field in _statement_lists(statement) if field]
        last = max(first, min(bodies) - 1) if bodies else statement.end_lineno or first
        text = "\n".join(lines[first - 1 : last])
        return any(letters in text for letters in _TARGET_LETTERS) or _QUOTED_VERSION.search(text) is not None

    return holds


def _walk_scopes(body: list[ast.stmt], prefix: str, line: int) -> Iterator[tuple[str, list[ast.stmt], int]]:
    """(qualified name, the statements that belong to it and not to a nested def or class, first line)."""
    own: list[ast.stmt] = []
    nested: list[tuple[str, list[ast.stmt], int]] = []
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            nested.append((f"{prefix}{node.name}.<locals>.", node.body, node.lineno))
        elif isinstance(node, ast.ClassDef):
            nested.append((f"{prefix}{node.name}.", node.body, node.lineno))
        else:
            own.append(node)
            stack.extend(reversed(_child_statements(node)))
    yield prefix.removesuffix(".").removesuffix(".<locals>"), own, line
    for inner, statements, first in nested:
        yield from _walk_scopes(statements, inner, first)


def _child_statements(node: ast.stmt) -> list[ast.stmt]:
    """The statements an if, for, while, with or try holds (their own scope's, not a new one)."""
    return [child for statements in _statement_lists(node) for child in statements]


def _statement_lists(node: ast.stmt) -> list[list[ast.stmt]]:
    return [*statement_blocks(node), *(case.body for case in getattr(node, "cases", None) or [])]


def _own_choices(
    statements: list[ast.stmt], may_hold_targets: Callable[[ast.stmt], bool]
) -> tuple[list[str], list[str]]:
    clamps: list[str] = []
    targets: list[str] = []
    for statement in statements:
        if isinstance(statement, ast.Assign) and _clamps_arch(statement):
            clamps.append(ast.unparse(statement))
        if not may_hold_targets(statement):
            continue
        nodes = list(_expressions(statement))
        if _assigns_arch_list(statement):  # cuda_archs = ";".join(("75-real", "90a-real", "120-virtual"))
            targets.extend(_cmake_arches(nodes))
        compared = {
            id(side) for node in nodes if isinstance(node, ast.Compare) for side in (node.left, *node.comparators)
        }
        # a collection compared with (`get_arch() in ("gfx942",)`) is a condition, a condition row's
        for node in nodes:
            if isinstance(node, ast.List | ast.Tuple | ast.Set) and id(node) not in compared:
                targets.extend(
                    item.value
                    for item in node.elts
                    if isinstance(item, ast.Constant) and isinstance(item.value, str) and _TARGET.search(item.value)
                )
        for node in nodes:  # a keyword argument's string of targets: `default="gfx906;gfx1030"`
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                        targets.extend(_target_list(keyword.value.value))
    return clamps, targets


def _assigns_arch_list(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AnnAssign):
        targets = [statement.target]
    else:
        return False
    return any(_ARCH_LIST_TEXT.search(ast.unparse(target)) for target in targets)


def _cmake_arches(nodes: list[ast.AST]) -> Iterator[str]:
    """The strings of a list or tuple that holds only CMake CUDA arches ("80-real", "90a-real", "120")."""
    for node in nodes:
        if isinstance(node, ast.List | ast.Tuple | ast.Set) and node.elts:
            values = [item.value if isinstance(item, ast.Constant) else None for item in node.elts]
            if all(isinstance(value, str) and _CMAKE_ARCH.match(value) for value in values):
                yield from (str(value) for value in values)


def _target_list(value: str) -> list[str]:
    """The targets of a string that holds nothing else ("gfx906;gfx1030", "sm_80 sm_90"); [] for any other string."""
    tokens = [token for token in _SEPARATORS.split(value.strip()) if token]
    return tokens if all(_BARE_TARGET.match(token) for token in tokens) else []


def _expressions(statement: ast.stmt) -> Iterator[ast.AST]:
    """The expression nodes of one statement, without the statements it holds (walked as their own)."""
    for field, value in ast.iter_fields(statement):
        if field in ("body", "orelse", "finalbody", "handlers", "cases"):
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST):
                yield from ast.walk(item)


def _clamps_arch(statement: ast.Assign) -> bool:
    """`arch = min(arch, 90)`: one arch-named target, set from min/max of itself and a number."""
    if len(statement.targets) != 1 or not isinstance(target := statement.targets[0], ast.Name):
        return False
    value = statement.value
    return (
        _ARCH_NAME.search(target.id) is not None
        and isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in ("min", "max")
        and any(isinstance(arg, ast.Constant) and isinstance(arg.value, int) for arg in value.args)
    )
