"""The functions a commit changes in a Python module, and the dispatch-logic row that names one of them: shared by
the rules that compare what a function's own code does on both sides (toggle_arguments.py, chosen_literals.py,
changed_branches.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from bisector.analysis.code_shape import FunctionNode, ParsedSource, module_functions, source_lines
from bisector.analysis.findings import Finding, FindingKind, short_text


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
