"""Implementations tried in order: a function that lists the classes (or partials of them) it picks from, first
usable first, and whose list the commit reorders, changes which one runs where both are usable:

    renderers = [partial(CUDARenderer, arch), partial(NAKRenderer, arch), partial(CUDARenderer, arch, use_nvcc=True)]
 -> renderers = [partial(CUDARenderer, arch), partial(CUDARenderer, arch, use_nvcc=True), partial(NAKRenderer, arch)]

One dispatch-logic row named by the function, unless another row names it. A list is one of choices when it holds
two or more different entries, each naming a class (a CamelCase name) called, partially applied or as is, or a tuple
of those (a renderer with its compiler); only the same entries in another order make the row (an entry added or
dropped is new or dropped code, which other rules read).
"""

from __future__ import annotations

import ast
import re
from collections import Counter

from bisector.analysis.code_shape import FunctionNode, ParsedSource, last_name, own_nodes, source_lines
from bisector.analysis.findings import Finding
from bisector.analysis.function_changes import changed_functions, function_row

# `= [` or `= [(` (across lines) before a class, its call or a partial of it: `= [partial(CUDARenderer, arch), ...`
_LIST_OF_CLASSES = re.compile(
    r"=\s*[\[(]+\s*(?:(?:functools\.)?partial\(\s*)?(?:\w+\.)*_?(?:[A-Z][a-z0-9]+[A-Z]|[A-Z]{2,}[a-z])"
)
_CLASS_NAME = re.compile(r"^_?[A-Z][a-z0-9]+[A-Z]\w*$|^_?[A-Z]{2,}[a-z]\w*$")  # NAKRenderer, CUDARenderer, HipCompiler


def with_order_rows(
    path: str, before: ParsedSource | None, after: ParsedSource | None, rows: list[Finding]
) -> list[Finding]:
    """The module's rows and a dispatch-logic row for each function, named by no row, that reorders a list of
    implementations."""
    if before is None or after is None:
        return rows
    named = {row.name for row in rows}
    added = []
    for name, old, node in changed_functions(before, after, lambda name, node: name in named):
        if not _LIST_OF_CLASSES.search("\n".join(source_lines(after, node))):
            continue  # the cheap test first: no list that starts with a class
        was, now = _choice_lists(old), _choice_lists(node)
        for target in sorted(was.keys() & now.keys()):
            if was[target] != now[target] and Counter(was[target]) == Counter(now[target]):
                detail = f"tries the implementations in {target} in another order"
                added.append(function_row(path, name, node, was[target], now[target], detail, key=target))
                break
    return rows + added


def _choice_lists(function: FunctionNode) -> dict[str, list[str]]:
    """target text -> entry texts of the function's own assignments of a list (or tuple) of implementations."""
    found: dict[str, list[str]] = {}
    for node in own_nodes(function):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.List | ast.Tuple):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            entries = node.value.elts
            if len(targets) == 1 and len(set(map(ast.dump, entries))) >= 2 and all(map(_names_class, entries)):
                found[ast.unparse(targets[0])] = [ast.unparse(entry) for entry in entries]
    return found


def _names_class(entry: ast.expr) -> bool:
    """A class, a call of one or a partial of one (`partial(CUDARenderer, arch)`), or a tuple of those."""
    if isinstance(entry, ast.Tuple):
        return bool(entry.elts) and all(map(_names_class, entry.elts))
    if isinstance(entry, ast.Call):
        applied = entry.args[0] if last_name(entry.func) == "partial" and entry.args else entry.func
        return _CLASS_NAME.match(last_name(applied)) is not None
    return _CLASS_NAME.match(last_name(entry)) is not None
