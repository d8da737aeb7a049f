"""ast.walk without its generator layers: the same nodes in the same order (breadth first), in about half the time.
The scans walk every expression of the functions a commit changes, and CuTe DSL modules have thousands of lines."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under node (node included), as ast.walk yields them."""
    todo: deque[ast.AST] = deque([node])
    take, put = todo.popleft, todo.append
    while todo:
        node = take()
        for name in node._fields:
            field = getattr(node, name, None)
            if isinstance(field, ast.AST):
                put(field)
            elif isinstance(field, list):
                for item in field:
                    if isinstance(item, ast.AST):
                        put(item)
        yield node
