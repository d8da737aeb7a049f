"""The arguments of a launch site as the reader sees them: a local name shown with what the function assigns to it."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from bisector.analysis.findings import short_text


def resolved(arguments: dict[str, str], assigned: dict[str, list[str]]) -> dict[str, str]:
    """Arguments passed as a local name, shown with what the function assigns to that name."""
    out: dict[str, str] = {}
    for name, value in arguments.items():
        values = assigned.get(value) if value.isidentifier() else None
        out[name] = f"{value} (= {' | '.join(values)})" if values else value
    return out


def assignments(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, list[str]]:
    """name -> the expressions assigned to it in the function's own body (not nested functions), in order."""
    found: dict[str, list[str]] = {}
    for node in _own_nodes(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(short_text(ast.unparse(node.value)))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name) and node.value:
            operator = "=" if isinstance(node, ast.AnnAssign) else f"{_OPS.get(type(node.op), '?')}="
            text = short_text(ast.unparse(node.value))
            found.setdefault(node.target.id, []).append(text if operator == "=" else f"{operator} {text}")
    return found


_OPS: dict[type[ast.operator], str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/"}


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                stack.append(child)
