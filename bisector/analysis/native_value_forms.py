"""A C / C++ expression written without what cannot change its value, to tell a rewrite from a change: number
literals' type suffixes (`0.0113f` is `0.0113`), casts (`static_cast<unsigned long>(m)`, `(size_t)n`), blanks,
parentheses that the operators' precedence makes redundant, and, when given, the constant locals the expression
reads, replaced by their values (`const auto mnk = m * n * k;` ... `mnk < limit` is `m * n * k < limit`)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from bisector.analysis.native_directives import DEFINE

MAX_FORM_CHARS = 2000  # longer expressions are compared as written
_STATIC_CAST = re.compile(r"\bstatic_cast\s*<[^<>()]*(?:<[^<>()]*>[^<>()]*)*>\s*\(")
_C_CAST = re.compile(
    r"\(\s*(?:const\s+)?(?:(?:unsigned|signed)\s+)?(?:long\s+long|long|int|short|char|size_t|ptrdiff_t|"
    r"u?int(?:8|16|32|64)_t|index_t|float|double|bool)\s*\)\s*(?=[\w(])"
)
_SINGLE_TOKEN = re.compile(r"[\w.]+")
_TYPENAME = re.compile(r"\btypename\s+")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\.\.\.|->|::|<<=|>>=|<=|>=|==|!=|&&|\|\||<<|>>|\+\+|--|[-+*/%&|^]=|\S")
_BINARY = {
    "*": 13, "/": 13, "%": 13, "+": 12, "-": 12, "<<": 11, ">>": 11, "<": 10, "<=": 10, ">": 10, ">=": 10,
    "==": 9, "!=": 9, "&": 8, "^": 7, "|": 6, "&&": 5, "||": 4, "?": 3, ":": 3, "=": 2, "+=": 2, "-=": 2,
    "*=": 2, "/=": 2, "%=": 2, "&=": 2, "|=": 2, "^=": 2, "<<=": 2, ">>=": 2, ",": 1,
}  # fmt: skip
_UNARY = 14
_POSTFIX = 15
_PRIMARY = 16
_CALLERS = frozenset({"if", "while", "for", "switch", "sizeof", "alignof", "decltype", "noexcept", "constexpr"})
_OPENERS = frozenset({"(", "[", "{", ",", ";", "return", "case", "co_return", "throw"})


def value_form(text: str, constants: Mapping[str, str] | None = None) -> str:
    """The expression's tokens joined without blanks, after the rewrites that keep its value."""
    if len(text) > MAX_FORM_CHARS:
        return " ".join(text.split())
    if constants:
        text = re.sub(r"(?<![\w.>:])[A-Za-z_]\w*\b(?!\s*\()", lambda m: _constant(m[0], constants), text)
    text = _STATIC_CAST.sub("(", text)
    text = _C_CAST.sub("", text)
    text = _TYPENAME.sub("", text)
    return " ".join(_without_redundant_parentheses([_number(token) for token in _TOKEN.findall(text)]))


def _number(token: str) -> str:
    """A number literal without its type suffix (`0.0113f` is `0.0113`, `4u` is `4`); other tokens as they are."""
    if not token[0].isdigit():
        return token
    return token.rstrip("uUlL") if token.lower().startswith("0x") else token.rstrip("uUlLfF")


def macro_values(lines: list[str]) -> dict[str, str]:
    """The object-like macros the lines define once, with their values (`#define WARP_SIZE 32`)."""
    found: dict[str, str] = {}
    twice: set[str] = set()
    for line in lines:
        if "define" not in line or (macro := DEFINE.match(line)) is None:
            continue
        if macro["name"] in found:
            twice.add(macro["name"])
        found[macro["name"]] = macro["value"]
    return {name: value for name, value in found.items() if name not in twice}


def tested_again(line: str, other_lines: list[str]) -> bool:
    """The test of condition line `line` (the parentheses after its if / while) is written, in parentheses, in
    other_lines too (`if constexpr (!sizeof...(Args)) {` and `AF_IF_CONSTEXPR(!sizeof...(Args))`)."""
    tested = _tested(line)
    if not tested or len(tested) > MAX_FORM_CHARS:
        return False
    other, form = f" {value_form(' '.join(other_lines))} ", value_form(tested)
    return f"( {form} )" in other or f" {form} " == other


def _tested(line: str) -> str:
    opening = TEST_START.match(line)
    if opening is None:
        return ""
    depth = 0
    for index in range(opening.end() - 1, len(line)):
        depth += {"(": 1, ")": -1}.get(line[index], 0)
        if depth == 0:  # a line that holds the test alone: `} else if (c) {`, not `if (c) { x = a ? b : d; }`
            return line[opening.end() : index].strip() if line[index + 1 :].strip() in ("", "{") else ""
    return ""


TEST_START = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|while)\s*(?:constexpr\s*)?\(")  # an if / while to its `(`


def _constant(name: str, constants: Mapping[str, str]) -> str:
    value = constants.get(name)
    if value is None:
        return name
    return value if _SINGLE_TOKEN.fullmatch(value) else f"({value})"


def _without_redundant_parentheses(tokens: list[str]) -> list[str]:
    changed = True
    while changed:
        changed = False
        stack: list[int] = []
        for index, token in enumerate(tokens):
            if token == "(":
                stack.append(index)
            elif token == ")" and stack:
                start = stack.pop()
                if _redundant(tokens, start, index):
                    tokens = tokens[:start] + tokens[start + 1 : index] + tokens[index + 1 :]
                    changed = True
                    break
    return tokens


def _redundant(tokens: list[str], start: int, end: int) -> bool:
    """Parentheses tokens[start] / tokens[end] that group no call or cast and bind nothing the operators around them
    would not: their content's loosest operator binds tighter than the operators on either side."""
    before = tokens[start - 1] if start else "("
    if start == end - 1 or _calls(before):
        return False
    after = tokens[end + 1] if end + 1 < len(tokens) else ")"
    return _loosest(tokens[start + 1 : end]) > max(_left_binding(tokens, start - 1), _right_binding(after))


def _calls(before: str) -> bool:
    """A `(` after a name, a `)`, `]`, `>` or `...` opens a call, a cast's operand or a statement's condition."""
    if before in _CALLERS or before in (")", "]", ">", "..."):
        return True
    return (before[0].isalpha() or before[0] == "_") and before not in _OPENERS


def _left_binding(tokens: list[str], index: int) -> int:
    if index < 0 or tokens[index] in _OPENERS:
        return 0
    token = tokens[index]
    if token in ("!", "~") or _unary_at(tokens, index):
        return _UNARY
    return _BINARY.get(token, _PRIMARY)


def _right_binding(after: str) -> int:
    if after in (")", "]", "}", ",", ";"):
        return 0 if after != "," else _BINARY[","]
    if after in ("[", ".", "->", "(", "++", "--"):
        return _POSTFIX
    return _BINARY.get(after, _PRIMARY)


def _unary_at(tokens: list[str], index: int) -> bool:
    if tokens[index] not in ("-", "+", "*", "&"):
        return False
    return index == 0 or tokens[index - 1] in _BINARY or tokens[index - 1] in _OPENERS or tokens[index - 1] == "("


def _loosest(tokens: list[str]) -> int:
    """The binding strength of the loosest operator outside nested brackets (_PRIMARY for a name or a call)."""
    loosest, depth = _PRIMARY, 0
    for index, token in enumerate(tokens):
        if token in ("(", "[", "{"):
            depth += 1
        elif token in (")", "]", "}"):
            depth -= 1
        elif depth == 0:
            if token in ("!", "~", "++", "--") or _unary_at(tokens, index):
                loosest = min(loosest, _UNARY)
            elif token in _BINARY:
                loosest = min(loosest, _BINARY[token])
            elif token in ("return", "sizeof", "new", "delete", "throw"):
                loosest = min(loosest, 0 if token in ("return", "throw") else _UNARY)
    return loosest
