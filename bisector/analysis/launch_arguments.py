"""The arguments of a launch site as the reader sees them: a local name shown with what the function assigns to it."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping

from bisector.analysis.code_shape import own_nodes
from bisector.analysis.findings import short_text


def resolved(arguments: dict[str, str], assigned: Mapping[str, list[str]]) -> dict[str, str]:
    """Arguments passed as a local name, shown with what the function assigns to that name."""
    out: dict[str, str] = {}
    for name, value in arguments.items():
        values = assigned.get(value) if value.isidentifier() else None
        out[name] = f"{value} (= {' | '.join(values)})" if values else value
    return out


class Assignments(Mapping[str, list[str]]):
    """name -> the expressions assigned to it in a function's own body (not nested functions), in order; each
    name's texts are made when it is first read (a launch reads a few names of a function of thousands)."""

    def __init__(self, nodes: dict[str, list[ast.Assign | ast.AnnAssign | ast.AugAssign]]) -> None:
        self._nodes = nodes
        self._texts: dict[str, list[str]] = {}

    def __getitem__(self, name: str) -> list[str]:
        if name not in self._texts:
            self._texts[name] = [_text(node) for node in self._nodes[name]]
        return self._texts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


def assignments(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Assignments:
    """name -> the expressions assigned to it in the function's own body (not nested functions), in order."""
    found: dict[str, list[ast.Assign | ast.AnnAssign | ast.AugAssign]] = {}
    for node in own_nodes(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name) and node.value:
            found.setdefault(node.target.id, []).append(node)
    return Assignments(found)


def _text(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> str:
    assert node.value is not None  # assignments() keeps only assignments of a value
    text = short_text(ast.unparse(node.value))
    if isinstance(node, ast.AugAssign):
        return f"{_OPS.get(type(node.op), '?')}= {text}"
    return text


_OPS: dict[type[ast.operator], str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/"}
