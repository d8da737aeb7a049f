"""Launch-config choosers: module functions that return a kernel's tiling or launch shape
(`return BLOCK_M, BLOCK_N, num_warps, num_stages`, `return {"BLOCK_M": 64, "num_warps": 4}`), computed from the
problem's sizes. What they return is what the launches that call them run with, so a change in such a function's
code (comments, layout and docstrings aside) is one dispatch-logic row under its name; the branch conditions
inside it are part of that decision and get no rows of their own. A chooser added whole is new code, shown by the
callers that start using it.
"""

from __future__ import annotations

import ast

from bisector.analysis.code_shape import (
    FunctionNode,
    ParsedSource,
    code_shape,
    module_functions,
    own_nodes,
    source_lines,
)
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.launch_calls import is_tile_name

MIN_TILE_VALUES = 2  # returned tile or launch names: one alone (a block size) is often a plain helper's result


def with_chooser_rows(
    path: str, before: ParsedSource | None, after: ParsedSource | None, rows: list[Finding]
) -> list[Finding]:
    """The module's rows with a dispatch-logic row for each chooser on both sides whose code changed (unless a
    dispatch-logic row names it already), less the branch-condition rows inside those choosers."""
    if before is None or after is None:
        return rows
    old = dict(module_functions(before.tree.body))
    changed = {
        name: node
        for name, node in module_functions(after.tree.body)
        if name in old
        and source_lines(before, old[name]) != source_lines(after, node)
        and _changed_chooser(old[name], node)
    }
    if not changed:
        return rows
    named = {row.name for row in rows if row.kind is FindingKind.DISPATCH_LOGIC}
    kept = [row for row in rows if not (row.kind is FindingKind.BRANCH_CONDITION and _inside(row.name, changed))]
    added = [
        Finding(
            FindingKind.DISPATCH_LOGIC,
            path,
            name,
            line=node.lineno,
            detail="returns the tile or launch parameters of a launch; its code changed",
        )
        for name, node in changed.items()
        if name not in named
    ]
    return kept + added


def _inside(name: str, functions: dict[str, FunctionNode]) -> bool:
    return any(name == function or name.startswith(f"{function}.<locals>.") for function in functions)


def _changed_chooser(old: FunctionNode, new: FunctionNode) -> bool:
    return _returns_tiles(new) and _returns_tiles(old) and code_shape(old) != code_shape(new)


def _returns_tiles(function: FunctionNode) -> bool:
    """Some return statement of the function itself (not of a nested one) returns at least MIN_TILE_VALUES tile
    or launch names, as a tuple of names or the string keys of a dict."""
    for node in own_nodes(function):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        value = node.value
        if isinstance(value, ast.Tuple | ast.List):
            names = [element.id for element in value.elts if isinstance(element, ast.Name)]
        elif isinstance(value, ast.Dict):
            names = [key.value for key in value.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)]
        else:
            continue
        if sum(map(is_tile_name, names)) >= MIN_TILE_VALUES:
            return True
    return False
