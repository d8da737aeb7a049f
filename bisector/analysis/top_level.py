"""Top-level functions and classes that two versions of a module share with the same text: their launch sites and
conditions scan the same on both sides, so neither side scans them."""

from __future__ import annotations

import ast

from bisector.analysis.conditions import module_gates
from bisector.analysis.function_logic import code_text


def same_top_level(
    old: ast.Module, old_lines: list[str], new: ast.Module, new_lines: list[str]
) -> tuple[frozenset[int], frozenset[int]]:
    """Indexes of the top-level functions and classes whose text (decorators included) both versions share, when
    the module gates are the same on both sides; empty sets otherwise."""
    if module_gates(old.body) != module_gates(new.body):
        return frozenset(), frozenset()
    old_texts = _definition_texts(old, old_lines)
    new_texts = _definition_texts(new, new_lines)
    common = set(old_texts.values()) & set(new_texts.values())
    return (
        frozenset(i for i, text in old_texts.items() if text in common),
        frozenset(i for i, text in new_texts.items() if text in common),
    )


def _definition_texts(tree: ast.Module, lines: list[str]) -> dict[int, str]:
    texts: dict[int, str] = {}
    for index, statement in enumerate(tree.body):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([statement.lineno, *(d.lineno for d in statement.decorator_list)])
            docstrings = {line for node in _with_methods(statement) for line in _docstring_lines(node)}
            kept = [lines[n - 1] for n in range(first, (statement.end_lineno or first) + 1) if n not in docstrings]
            texts[index] = code_text(kept)
    return texts


def _with_methods(statement: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[ast.stmt]:
    return [statement, *(s for s in statement.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef))]


def _docstring_lines(node: ast.stmt) -> range:
    """The lines of a function's or class's docstring (a docstring that changes changes no dispatch)."""
    body = getattr(node, "body", [])
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return range(first.lineno, (first.end_lineno or first.lineno) + 1)
    return range(0)
