"""Launch-config choosers: module functions that return a kernel's tiling or launch shape
(`return BLOCK_M, BLOCK_N, num_warps, num_stages`, `return {"BLOCK_M": 64, "num_warps": 4}`, `return dim_threads,
inner_threads`), computed from the problem's sizes. What they return is what the launches that call them run with,
so a change in such a function's code (comments, layout and docstrings aside) is one dispatch-logic row under its
name; the branch conditions inside it are part of that decision and get no rows of their own. A chooser added whole
is a row too when a function both versions have calls it (`if cap[1] in [6, 9]: ... = _kernel_meta_sm86(...)`): the
tiles it returns are what the launches of that caller now run with on the case it serves; one that nothing the
module had calls is new code.
"""

from __future__ import annotations

import ast
import re

from bisector.analysis.code_shape import (
    FunctionNode,
    ParsedSource,
    code_shape,
    last_name,
    module_functions,
    own_nodes,
    source_lines,
)
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.launch_calls import is_tile_name

MIN_TILE_VALUES = 2  # returned tile or launch names: one alone (a block size) is often a plain helper's result
# A launch's shape by name: dim_threads, threads_per_block, num_blocks, nblocks (tile names are launch_calls')
_LAUNCH_SHAPE = re.compile(r"threads|(^|_)n?blocks$", re.I)


def with_chooser_rows(
    path: str, before: ParsedSource | None, after: ParsedSource | None, rows: list[Finding]
) -> list[Finding]:
    """The module's rows with a dispatch-logic row for each chooser on both sides whose code changed, or added and
    called by a function both sides have (unless a dispatch-logic row names it already), less the branch-condition
    rows inside those choosers."""
    if before is None or after is None:
        return rows
    old = dict(module_functions(before.tree.body))
    new = list(module_functions(after.tree.body))
    changed = {
        name: node
        for name, node in new
        if name in old
        and source_lines(before, old[name]) != source_lines(after, node)
        and _changed_chooser(old[name], node)
    }
    changed.update(_called_new_choosers(new, old))
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
            detail="returns the tile or launch parameters of a launch; "
            + ("its code changed" if name in old else "new, and called by a function of both versions"),
        )
        for name, node in changed.items()
        if name not in named
    ]
    return kept + added


def _called_new_choosers(new: list[tuple[str, FunctionNode]], old: dict[str, FunctionNode]) -> dict[str, FunctionNode]:
    """The choosers only the new version has that a function of both versions calls by name."""
    added = {name: node for name, node in new if name not in old and _returns_tiles(node)}
    if not added:
        return {}
    short = {name.rsplit(".", 1)[-1]: name for name in added}
    called = {
        short[callee]
        for name, node in new
        if name in old
        for call in own_nodes(node)
        if isinstance(call, ast.Call) and (callee := last_name(call.func)) in short
    }
    return {name: added[name] for name in called}


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
        if sum(is_tile_name(name) or bool(_LAUNCH_SHAPE.search(name)) for name in names) >= MIN_TILE_VALUES:
            return True
    return False
