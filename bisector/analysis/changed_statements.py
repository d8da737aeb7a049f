"""The parts of a changed Python module whose text the other version lacks. Its top-level statements, for the scans
that compare a scope's contents on both sides (arch_targets.py, env_gates.py): a def, class or module-level statement
whose text both versions share gives the same contents on both, so neither side need walk it. Its functions, and the
dispatch-logic row that names one, for the rules that compare what a function's own code does on both sides
(toggle_arguments.py, chosen_literals.py, changed_branches.py, kernel_code.py).

Each statement's text is cut once per parsed version and kept on its tree, whichever scan asks first.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable, Iterator

from bisector.analysis.code_shape import FunctionNode, ParsedSource, first_line, module_functions, source_lines
from bisector.analysis.findings import Finding, FindingKind, short_text

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


def changed_functions(
    before: ParsedSource, after: ParsedSource, skip: Callable[[str, FunctionNode], bool]
) -> Iterator[tuple[str, FunctionNode, FunctionNode]]:
    """(name, old, new) for each function or method on both sides whose text differs, less those skip(name, new)
    leaves out. A name defined more than once in a version (`def _` under each of a series of registering
    decorators) pairs no two functions."""
    old_functions, new_functions = list(module_functions(before.tree.body)), list(module_functions(after.tree.body))
    repeated = _repeated(old_functions) | _repeated(new_functions)
    old = dict(old_functions)
    for name, node in new_functions:
        if name in repeated or name not in old or skip(name, node):
            continue
        if source_lines(before, old[name]) != source_lines(after, node):
            yield name, old[name], node


def _repeated(functions: list[tuple[str, FunctionNode]]) -> set[str]:
    seen: set[str] = set()
    repeated: set[str] = set()
    for name, _ in functions:
        (repeated if name in seen else seen).add(name)
    return repeated


def function_row(
    path: str, name: str, node: FunctionNode, gone: list[str], new: list[str], detail: str, key: str = ""
) -> Finding:
    """The dispatch-logic row of function name: what its code did (gone) and does (new), joined and shortened."""
    return Finding(
        FindingKind.DISPATCH_LOGIC,
        path,
        name,
        key=key,
        before=short_text("; ".join(gone)) if gone else None,
        after=short_text("; ".join(new)) if new else None,
        line=node.lineno,
        detail=detail,
    )
