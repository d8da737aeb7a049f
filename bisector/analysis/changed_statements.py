"""The top-level statements of a changed module whose text the other version lacks, for the scans that compare a
scope's contents on both sides (arch_targets.py, env_gates.py): a def, class or module-level statement
whose text both versions share gives the same contents on both, so neither side need walk it.

Each statement's text is cut once per parsed version and kept on its tree, whichever scan asks first.
"""

from __future__ import annotations

import ast
from collections import Counter

from bisector.analysis.code_shape import ParsedSource, first_line

MODULE = "<module>"  # the name of the module-level statements that are no def or class
_TEXTS = "_bisect_statement_texts"  # the attribute of the tree that keeps them


def top_name(statement: ast.stmt) -> str:
    """A def's or class's name, `<module>` for any other statement."""
    return statement.name if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) else MODULE


def statement_texts(module: ParsedSource) -> list[str]:
    """The source of each top-level statement (decorators included), in order."""
    texts: list[str] | None = getattr(module.tree, _TEXTS, None)
    if texts is None:
        texts = []
        for statement in module.tree.body:
            texts.append("\n".join(module.lines[first_line(statement) - 1 : statement.end_lineno or statement.lineno]))
        setattr(module.tree, _TEXTS, texts)
    return texts


def changed_statements(module: ParsedSource, other: ParsedSource) -> list[tuple[ast.stmt, str]]:
    """(statement, text) of module's top-level statements under a name (a def's, a class's, `<module>`) whose
    statements' texts differ from other's under that name: all of `<module>`'s when any of them changed."""
    mine, theirs = _by_name(module), _by_name(other)
    changed = {name for name in mine if mine[name] != theirs.get(name)}
    texts = statement_texts(module)
    return [(s, text) for s, text in zip(module.tree.body, texts, strict=True) if top_name(s) in changed]


def _by_name(module: ParsedSource) -> dict[str, Counter[str]]:
    grouped: dict[str, Counter[str]] = {}
    for statement, text in zip(module.tree.body, statement_texts(module), strict=True):
        grouped.setdefault(top_name(statement), Counter())[text] += 1
    return grouped
