"""Which table entry each line of a Python module belongs to, so a hunk that edits a table can be split into
one change unit per entry (the minimiser then tests a single row alone)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

EntryPath = tuple[str, ...]  # ("_TUNED_MMA_MIN_M", "(144, 7168)"): the table's name, then keys or indexes
_LITERALS = (ast.Dict, ast.List, ast.Tuple, ast.Set)


def entry_owners(source: str | bytes) -> dict[int, EntryPath]:
    """0-based line -> the innermost table entry on it. Comment lines just before an entry belong to it; lines
    shared by several entries belong to their container; lines outside table literals are not in the map.
    Empty when the source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    owners: dict[int, EntryPath] = {}
    for name, literal in _tables(tree.body, ""):
        _assign(literal, (name,), owners)
    return owners


def describe(path: EntryPath) -> str:
    """'_TUNED_MMA_MIN_M[(144, 7168)]'."""
    return path[0] + "".join(f"[{key}]" for key in path[1:])


def _tables(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.expr]]:
    for statement in body:
        if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
            literal = _literal(statement.value)
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if literal is not None and targets:
                yield prefix + ast.unparse(targets[0]), literal
        elif isinstance(statement, ast.ClassDef):
            yield from _tables(statement.body, f"{prefix}{statement.name}.")
        elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _decorator_tables(statement, prefix)


def _decorator_tables(function: ast.FunctionDef | ast.AsyncFunctionDef, prefix: str) -> Iterator[tuple[str, ast.expr]]:
    """configs=[triton.Config(...), ...] of an autotune, the dict of a heuristics."""
    for decorator in function.decorator_list:
        if not isinstance(decorator, ast.Call):
            continue
        called = f"{prefix}{function.name}@{ast.unparse(decorator.func)}"
        arguments = [(str(i), arg) for i, arg in enumerate(decorator.args)]
        arguments += [(kw.arg, kw.value) for kw in decorator.keywords if kw.arg]
        for label, value in arguments:
            literal = _literal(value)
            if literal is not None:
                yield f"{called}[{label}]", literal


def _literal(expr: ast.expr) -> ast.expr | None:
    if isinstance(expr, _LITERALS):
        return expr
    if isinstance(expr, ast.Call) and len(expr.args) == 1 and isinstance(expr.args[0], _LITERALS):
        return expr.args[0]  # dict({...}), frozenset({...}), MappingProxyType({...})
    return None


def _elements(literal: ast.expr) -> Iterator[tuple[str, int, int, ast.expr]]:
    """(key text, first line, last line, value) of each element, lines 0-based."""
    if isinstance(literal, ast.Dict):
        for key, value in zip(literal.keys, literal.values, strict=True):
            start = key if key is not None else value
            yield ast.unparse(key) if key is not None else "**", start.lineno - 1, _end(value), value
    elif isinstance(literal, ast.List | ast.Tuple | ast.Set):
        for index, element in enumerate(literal.elts):
            yield str(index), element.lineno - 1, _end(element), element


def _end(node: ast.expr) -> int:
    return (node.end_lineno or node.lineno) - 1


def _assign(literal: ast.expr, path: EntryPath, owners: dict[int, EntryPath]) -> None:
    elements = list(_elements(literal))
    claims: dict[int, int] = {}  # line -> how many elements touch it
    for _, first, last, _ in elements:
        for line in range(first, last + 1):
            claims[line] = claims.get(line, 0) + 1
    previous_end = literal.lineno - 1
    for key, first, last, value in elements:
        entry = (*path, key)
        shared = claims.get(first, 0) > 1 or first <= previous_end
        start = first if shared else previous_end + 1  # comment lines above an entry belong to it
        for line in range(start, last + 1):
            owners[line] = path if claims.get(line, 0) > 1 else entry
        previous_end = last
        inner = _literal(value)
        if inner is not None and _end(inner) > inner.lineno - 1:
            _assign(inner, entry, owners)
