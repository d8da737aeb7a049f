"""Defaults of registered options: a module that declares its knobs through a registry call, by name and default,

    DISABLE_FAST_IDIV = ContextVar("DISABLE_FAST_IDIV", 0)                    (read from the environment too)
    register_option(name="parallel_k", type_hint="Union[str, int]", default_value="default")

and changes a default, changes what runs wherever the option is not set. A constant row named by the option, for
each option declared on both sides (anywhere in the module: at module level or in a registering function) whose
default differs; an option added or dropped is new or dropped code. A registry call is one whose callee's name says
it declares an option, a flag, a setting or a context variable, with the option's name as a string (first argument
or name=) and a default (second argument or default= / default_value=).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from bisector.analysis.changed_statements import changed_statements
from bisector.analysis.code_shape import ParsedSource, last_name
from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.word_lines import holds_match, lines_holding, walk_on_lines

_REGISTRY_CALL = re.compile(
    r"^(?:ContextVar|Option|Flag|Setting|Knob)$|^(?:register|add|define|declare|new)_\w*(?:option|flag|setting|knob)s?$",
    re.I,
)
_REGISTRY_WORDS = ("contextvar", "option", "flag", "setting", "knob")
_REGISTRY_TEXT = re.compile(r"(?:contextvar|option|flag|setting|knob)s?\s*\(")  # searched in the lowered text
_DEFAULT_KEYWORDS = ("default", "default_value")


def option_default_rows(path: str, before: ParsedSource | None, after: ParsedSource | None) -> list[Finding]:
    """A constant row for each option declared on both sides with another default."""
    if before is None or after is None:
        return []
    old, new = _defaults(before, after), _defaults(after, before)
    rows = []
    for name in sorted(old.keys() & new.keys()):
        callee, was, _ = old[name]
        _, now, line = new[name]
        if was != now:
            rows.append(
                Finding(
                    FindingKind.CONSTANT,
                    path,
                    name,
                    key=f"default of {callee}",
                    before=short_text(was),
                    after=short_text(now),
                    line=line,
                    detail="the default of a registered option",
                )
            )
    return rows


def _defaults(module: ParsedSource, other: ParsedSource) -> dict[str, tuple[str, str, int]]:
    """option name -> (callee, default text, line) of each registry call in the module (read in the top-level
    statements that changed and whose text names a registry at all: most modules have none; a statement both
    versions share declares the same defaults on both)."""
    found: dict[str, tuple[str, str, int]] = {}
    statements = [statement for statement, text in changed_statements(module, other) if _names_a_registry(text)]
    nodes = (node for statement in statements for node in _walk_registry_lines(statement, module))
    for node in nodes:
        if not isinstance(node, ast.Call) or not _REGISTRY_CALL.match(callee := last_name(node.func)):
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg}
        name = node.args[0] if node.args else keywords.get("name")
        default = (
            node.args[1]
            if len(node.args) > 1
            else next((keywords[k] for k in _DEFAULT_KEYWORDS if k in keywords), None)
        )
        if isinstance(name, ast.Constant) and isinstance(name.value, str) and default is not None:
            found.setdefault(name.value, (callee, ast.unparse(default), node.lineno))
    return found


def _walk_registry_lines(statement: ast.stmt, module: ParsedSource) -> Iterator[ast.AST]:
    """The statement's nodes, less the subtrees on no line that holds a registry's word (a long class's other
    methods), where the module's lines number its tree."""
    if not module.numbered:
        return ast.walk(statement)
    numbers = lines_holding(module.lines, statement, lambda line: any(w in line.lower() for w in _REGISTRY_WORDS))
    return walk_on_lines(statement, numbers)


def _names_a_registry(text: str) -> bool:
    """A registry's name before a parenthesis; the regex runs only where one of its words is (most texts have none)."""
    return holds_match(text.lower(), _REGISTRY_WORDS, _REGISTRY_TEXT)
