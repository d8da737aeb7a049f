"""ast.walk for the scans that look for calls, conditional expressions, comprehensions and assignments: the same
nodes in the same order (breadth first) but the leaves, without ast.walk's generator layers. The scans walk every
expression of the functions a commit changes, and CuTe DSL modules have thousands of lines."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator

# Nodes that hold no other node a scan looks for (a call, a choice, an assignment): names, constants, operators.
_LEAVES = (ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)


def walk_inner(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk(node) without the leaves under node (names, constants, operators): node and the nodes under it
    that can hold a call, a conditional expression, a comprehension or an assignment, in ast.walk's order."""
    todo: deque[ast.AST] = deque([node])
    take, put = todo.popleft, todo.append
    while todo:
        node = take()
        for name in node._fields:
            field = getattr(node, name, None)
            if isinstance(field, ast.AST):
                if not isinstance(field, _LEAVES):
                    put(field)
            elif isinstance(field, list):
                for item in field:
                    if isinstance(item, ast.AST) and not isinstance(item, _LEAVES):
                        put(item)
        yield node


_LOADED = "_bisect_loaded_names"  # the attribute of a node that keeps loaded_names' set


def loaded_names(node: ast.AST) -> frozenset[str]:
    """The names read anywhere under node (nested functions included), walked once per node and kept on it."""
    found: frozenset[str] | None = getattr(node, _LOADED, None)
    if found is None:
        found = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
        setattr(node, _LOADED, found)
    return found
