"""Top-level functions and classes, and methods of the other classes, that two versions of a module share with the
same text: their launch sites and conditions scan the same on both sides, so neither side scans them."""

from __future__ import annotations

import ast
import re
from collections import Counter

from bisector.analysis.code_shape import docstring_lines, first_line
from bisector.analysis.conditions import module_gates
from bisector.analysis.launch_calls import decorated, launch_test
from bisector.analysis.reach import FunctionNode, LaunchGraph, module_functions

# A Python comment: a whole line ("# note"; not "#define" in a string of C source), or "  # note" after code when
# neither the code's last character nor the note is a quote. Comments change nothing a scan reads.
_COMMENT = re.compile(r"^\s*#(?:\s.*)?$|(?<=[^'\"#\s])\s+#\s[^'\"]*$")


def code_text(lines: list[str]) -> str:
    """Source lines without comments and blank lines: equal code texts scan the same."""
    code = ((_COMMENT.sub("", line) if "#" in line else line).rstrip() for line in lines)
    return "\n".join(line for line in code if line)


# What two versions share with the same text: indexes of one side's top-level definitions, qualified method names.
Unchanged = tuple[frozenset[int], frozenset[str]]


def same_top_level(
    old: ast.Module, old_lines: list[str], new: ast.Module, new_lines: list[str]
) -> tuple[frozenset[int], frozenset[int]]:
    """Indexes of the top-level functions and classes whose text (decorators included) both versions share, or
    share but for a name one version gives them (a rename), when the module gates are the same on both sides; empty
    sets otherwise."""
    if module_gates(old.body) != module_gates(new.body):
        return frozenset(), frozenset()
    old_texts = _definition_texts(old, old_lines)
    new_texts = _definition_texts(new, new_lines)
    common = set(old_texts.values()) & set(new_texts.values())
    renamed = set(_nameless(old, old_texts, new).values()) & set(_nameless(new, new_texts, old).values())
    return (
        frozenset(i for i, text in old_texts.items() if text in common or _nameless_text(old, i, text) in renamed),
        frozenset(i for i, text in new_texts.items() if text in common or _nameless_text(new, i, text) in renamed),
    )


def _nameless(tree: ast.Module, texts: dict[int, str], other: ast.Module) -> dict[int, str]:
    """The texts of the definitions whose names the other version does not define, with their own names blanked:
    a definition renamed with the same code (`class KMisrtalMoE` -> `class KMistralMoE`) is the same code."""
    names = {s.name for s in other.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    return {
        index: _nameless_text(tree, index, text)
        for index, text in texts.items()
        if getattr(tree.body[index], "name", None) not in names
    }


def _nameless_text(tree: ast.Module, index: int, text: str) -> str:
    return re.sub(rf"\b{re.escape(getattr(tree.body[index], 'name', ''))}\b", "_", text)


def _definition_texts(tree: ast.Module, lines: list[str]) -> dict[int, str]:
    texts: dict[int, str] = {}
    for index, statement in enumerate(tree.body):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = first_line(statement)
            docstrings = {line for node in _with_methods(statement) for line in docstring_lines(node)}
            kept = [lines[n - 1] for n in range(first, (statement.end_lineno or first) + 1) if n not in docstrings]
            texts[index] = code_text(kept)
    return texts


def _with_methods(statement: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[ast.stmt]:
    return [statement, *(s for s in statement.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef))]


def same_methods(old: ast.Module, old_lines: list[str], new: ast.Module, new_lines: list[str]) -> frozenset[str]:
    """Qualified names ("Cls.m") of the class methods that both versions define once, with the same text
    (decorators included), when what else a method's scan reads is the same on both sides: the module gates, the
    module's kernels and native extension imports, and whether each module function whose text differs launches a
    kernel (reach.py) where a function of the same text names it (a call names its callee); empty otherwise. The
    gates a method sees also come from the statements before it: the walker keeps them for each method it skips
    (SiteScan.skipped), and the caller compares the two sides."""
    if module_gates(old.body) != module_gates(new.body) or decorated(old) != decorated(new):
        return frozenset()
    old_texts, new_texts = _function_texts(old, old_lines), _function_texts(new, new_lines)
    changed = {
        name
        for name in old_texts.keys() | new_texts.keys()
        if old_texts.get(name) is None or old_texts.get(name) != new_texts.get(name)
    }
    old_graph, new_graph = LaunchGraph(old, launch_test(decorated(old))), LaunchGraph(new, launch_test(decorated(new)))
    if (old_graph.native_modules, old_graph.kernels) != (new_graph.native_modules, new_graph.kernels):
        return frozenset()
    callers = "\n".join(text for name, text in old_texts.items() if text and name not in changed)
    called = [name for name in changed if re.search(_call_pattern(name), callers)]
    if any(_launching(old_graph, name) != _launching(new_graph, name) for name in called):
        return frozenset()  # a method of the same text may launch through it on one side only
    return frozenset(name for name in old_texts.keys() & new_texts.keys() if "." in name and name not in changed)


def _function_texts(tree: ast.Module, lines: list[str]) -> dict[str, str | None]:
    """Module functions and class methods (reach.module_functions) by qualified name -> text; None for a name
    defined more than once (a property's getter and setter)."""
    functions = [(name, node) for name, _, node in module_functions(tree.body)]
    counts = Counter(name for name, _ in functions)
    return {name: _text(node, lines) if counts[name] == 1 else None for name, node in functions}


def _text(function: FunctionNode, lines: list[str]) -> str:
    first = first_line(function)
    docstring = docstring_lines(function)
    return code_text([lines[n - 1] for n in range(first, (function.end_lineno or first) + 1) if n not in docstring])


def _call_pattern(name: str) -> str:
    """What a call of the module function or method name needs in its caller's text (reach.callee_name): the
    function's name, or an attribute of that name for a method (self.m, cls.m, Cls.m)."""
    function = re.escape(name.rsplit(".", 1)[-1])
    return rf"\.[\s\\]*{function}\b" if "." in name else rf"\b{function}\b"


def _launching(graph: LaunchGraph, name: str) -> bool:
    return name in graph.definitions and graph.launching(name)
