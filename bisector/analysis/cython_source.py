"""Cython source (.pyx / .pxd / .pxi) rewritten as Python source that `ast.parse` accepts, line for line.

The Python scanners then read a Cython module's branch conditions, thresholds and launches as they read a Python
module's. Only the C-level syntax is removed, each statement keeping its lines (an AST node's line number is the
same in the Cython file):

    cdef / cpdef / ctypedef declarations   `cdef size_t n = f(x)` -> `n = f(x)`; one without a value -> `pass`
    cdef / cpdef functions                  `cdef inline bint f(int n) except * nogil:` -> `def f(n):`
    typed parameters of def functions       `def f(_ndarray_base x, tuple axis=None)` -> `def f(x, axis=None)`
    cdef class                              `cdef class Function:` -> `class Function:`
    cimport, include, ctypedef, and blocks  extern / struct / enum / union / fused blocks -> `pass` and blank lines
    compile-time IF / ELIF / ELSE / DEF     -> if / elif / else / an assignment
    casts and C literals                    `<void*>p` -> `p`, `&x` -> `x`, `0x7fffffffUL` -> `0x7fffffff`

The rewrite is textual and makes no promise: what it leaves unparsable the caller skips.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from bisector.analysis.source_text import Language, blanked, pieces, spans

CYTHON_SUFFIXES = (".pyx", ".pxd", ".pxi")

_IDENT = r"[A-Za-z_]\w*"
_DROPPED_LINE = re.compile(r"(from\s+[\w.]+\s+cimport\b|cimport\b|include\s+['\"])")
_BLOCK_DECLARATION = re.compile(
    r"(ctypedef|cdef|cpdef)\s+((public|api|packed|extern|readonly)\s+)*"
    r"(extern\b|struct\b|union\b|enum\b|cppclass\b|fused\b)"
)
_CLASS = re.compile(r"c(p)?def\s+((public|api|final|inline|readonly)\s+)*class\b")
_CLASS_OPTIONS = re.compile(r"\s*\[[^\]]*\]")  # `[object Name, type NameType]` of a public class
_PROPERTY = re.compile(r"property\s+([A-Za-z_]\w*)(?=\s*:)")
_SIZEOF = re.compile(r"\bsizeof\(([^()]*)\)")
_COMPILE_TIME = re.compile(r"(IF|ELIF|ELSE|DEF)\b")
_CDEF_BLOCK = re.compile(r"[ \t]*(cdef|cpdef)(\s+(public|readonly|api|extern))*\s*:\s*(#.*)?$")
_DECLARED = re.compile(r"(cdef|cpdef)\b")
_FUNCTION_START = re.compile(r"(async\s+)?def\b")
_INTEGER_SUFFIX = re.compile(r"\b(0[xX][0-9a-fA-F]+|0[oObB]?[0-7]+|[1-9]\d*|0)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b")
_CAST = re.compile(r"<\s*(?:[A-Za-z_]\w*\s+)*[A-Za-z_][\w.]*(?:\[[^\]<>]*\])?(?:[*&\s]|const\b)*\??\s*>")
_ADDRESS_OF = re.compile(r"&(?!=)\s*")
_OPERAND_END = re.compile(r"[\w)\]}'\"]$")
_KEYWORDS_BEFORE_OPERAND = frozenset(
    {"return", "and", "or", "not", "in", "is", "if", "elif", "else", "while", "yield", "lambda", "assert", "print"}
)
_DECLARATION_WORDS = frozenset({"cdef", "cpdef", "inline", "public", "api", "readonly", "static", "const"})
_PARAMETER_TAIL = re.compile(r"\s+(not|or)\s+None\s*$")


def python_source_of_cython(text: str) -> str:
    """The Python source of a Cython module, with as many lines as it has."""
    lines = text.split("\n")
    out = list(lines)
    in_strings = _lines_in_strings(text)
    cdef_block: int | None = None  # the indent of the `cdef:` header whose declarations follow
    index = 0
    while index < len(lines):
        line = lines[index]
        if index in in_strings:
            index += 1
            continue
        if cdef_block is not None and line.strip() and _indent_of(line) <= cdef_block:
            cdef_block = None
        end = _statement_end(lines, index)
        statement = lines[index : end + 1]
        if cdef_block is not None and line.strip():
            statement = [line[: _indent_of(line)] + "cdef " + line.lstrip(" \t"), *statement[1:]]
        rewritten = _rewrite_statement(statement)
        if rewritten is None:  # a block header: the header becomes `pass`, its body blank lines
            body_end = _block_end(lines, index, end)
            out[index : body_end + 1] = [line[: _indent_of(line)] + "pass"] + [""] * (body_end - index)
            index = body_end + 1
            continue
        if _CDEF_BLOCK.match(line):
            cdef_block = _indent_of(line)
        out[index : end + 1] = rewritten
        index = end + 1
    return "\n".join(out)


def _lines_in_strings(text: str) -> set[int]:
    """The lines (from 0) that begin inside a multi-line string."""
    inside: set[int] = set()
    line = position = 0
    for span in spans(text, Language.PYTHON):
        line += text.count("\n", position, span.start)
        position = span.start
        if not span.comment:
            inside.update(range(line + 1, line + 1 + text.count("\n", span.start, span.end)))
    return inside


def _rewrite_statement(statement: list[str]) -> list[str] | None:
    """The statement's lines as Python, or None for a block header whose block is dropped."""
    first = statement[0]
    indent = first[: _indent_of(first)]
    body = first[len(indent) :]
    if _DROPPED_LINE.match(body):
        return [f"{indent}pass"] + [""] * (len(statement) - 1)
    if _BLOCK_DECLARATION.match(body) or body.startswith("ctypedef"):
        if _code(statement[-1]).rstrip().endswith(":"):
            return None
        return [f"{indent}pass"] + [""] * (len(statement) - 1)
    if (found := _CLASS.match(body)) is not None:
        return [indent + "class" + _CLASS_OPTIONS.sub("", body[found.end() :]), *statement[1:]]
    if (found := _PROPERTY.match(body)) is not None:  # the old `property name:` block of __get__ / __set__
        return [f"{indent}class {found.group(1)}{body[found.end() :]}", *statement[1:]]
    if (found := _COMPILE_TIME.match(body)) is not None:
        word, rest = found.group(1), body[found.end() :]
        header = rest.lstrip() if word == "DEF" else word.lower() + rest
        return [_expressions(indent + header), *statement[1:]]
    if _CDEF_BLOCK.match(first):
        return [f"{indent}if True:"]  # its lines are declarations without `cdef`
    if _DECLARED.match(body):
        return _declaration(indent, "\n".join(statement)[len(indent) :]).split("\n")
    if _FUNCTION_START.match(body):
        return _function(indent, "\n".join(statement)[len(indent) :], keep_suffix=True).split("\n")
    return _expressions("\n".join(statement)).split("\n")


def _declaration(indent: str, text: str) -> str:
    """A `cdef` / `cpdef` statement (without its indent) as Python."""
    words = text.split(None, 1)
    rest = words[1] if len(words) > 1 else ""
    code = _code(text).rstrip()
    opening = _name_paren(rest)
    if opening is not None and code.endswith(":"):
        return _function(indent, rest, keep_suffix=False)
    equals = _top_level_equals(rest)
    if equals is None:
        if opening is not None:  # a prototype (a .pxd's method, perhaps under a decorator)
            return _function(indent, rest + ":", keep_suffix=False) + " ..."
        return f"{indent}pass" + "\n" * text.count("\n")  # a declaration without a value
    assignments, newlines = [], 0
    for part in _split_top_level(rest):  # `cdef int a = 0, b = 1` declares two
        equals = _top_level_equals(part)
        target = re.findall(_IDENT, part[:equals]) if equals is not None else []
        if equals is None or not target:
            newlines += part.count("\n")
            continue
        assignments.append(_expressions(f"{target[-1]} ={part[equals + 1 :]}"))
        newlines += part[:equals].count("\n")
    return indent + "; ".join(assignments) + "\n" * newlines


def _function(indent: str, text: str, keep_suffix: bool) -> str:
    """A function header (def, or a cdef one without `cdef`): typed parameters and C clauses removed."""
    opening = _name_paren(text)
    if opening is None:
        return indent + text
    closing = _matching_paren(text, opening)
    if closing is None:
        return indent + text
    name = re.findall(_IDENT, text[:opening])[-1]
    parameters = ",".join(_parameter(part) for part in _split_top_level(text[opening + 1 : closing]))
    suffix = text[closing + 1 :]
    code = _code(suffix)
    colon = code.rstrip().rfind(":")
    tail = suffix[colon + 1 :] if colon >= 0 else ""
    kept = code[:colon] if keep_suffix and colon >= 0 and "->" in code else ""
    prefix = "async def" if text.startswith("async") else "def"
    head = f"{indent}{prefix} {name}({parameters}){kept}:"
    return head + "\n" * (suffix[: max(colon, 0)].count("\n")) + _comment_newlines(tail)


def _parameter(part: str) -> str:
    """One parameter without its C type: `_ndarray_base x=None` -> `x=None`, keeping the newlines around it."""
    part = "".join(piece for piece, span in pieces(part, Language.PYTHON) if not (span and span.comment))
    stripped = part.strip()
    if not stripped:
        return part
    leading = re.sub(r"[ \t]+\n", "\n", part[: len(part) - len(part.lstrip())])  # no spaces a cut comment left
    trailing = re.sub(r"[ \t]+\n", "\n", part[len(part.rstrip()) :])
    equals = _top_level_equals(stripped)
    declared, default = (stripped, "") if equals is None else (stripped[:equals], stripped[equals:])
    declared = _PARAMETER_TAIL.sub("", declared.split("#")[0])
    names = re.findall(_IDENT, declared)
    if not names:
        return part
    star = re.match(r"\*{1,2}", declared.strip())
    stars = star.group() if star and declared.strip()[len(star.group()) :].strip() == names[-1] else ""
    hidden = declared.count("\n")
    default = "=..." if default.replace(" ", "") in ("=*", "=?") else _expressions(default)  # a .pxd's "has one"
    return f"{leading}{stars}{names[-1]}{default}{chr(10) * hidden}{trailing}"


def _expressions(text: str) -> str:
    """Casts, address-of and C integer suffixes removed from code (strings and comments kept as they are)."""
    out, seen = [], []  # seen: the code so far, a string as a name, no comments (what a cast follows)
    for code, span in pieces(text, Language.PYTHON):
        if span:
            out.append(code)
            seen.append("" if span.comment else "s")
            continue
        code = _without_casts(_INTEGER_SUFFIX.sub(r"\1", code), "".join(seen))
        out.append(code)
        seen.append(code)
    return "".join(out)


def _without_casts(code: str, before: str) -> str:
    """Casts and address-of operators removed: a `<` or `&` in an operand's place (not after one) is C syntax."""
    code = _without_prefixes(_CAST, code, before)
    code = _without_prefixes(_ADDRESS_OF, code, before)
    return _SIZEOF.sub(lambda found: "sizeof(" + "_".join(found.group(1).replace("*", " ").split()) + ")", code)


def _without_prefixes(pattern: re.Pattern[str], code: str, before: str) -> str:
    result: list[str] = []
    position = 0
    for found in pattern.finditer(code):
        preceding = (before + "".join(result) + code[position : found.start()]).rstrip()
        word = re.search(r"(\w+)$", preceding)
        if _OPERAND_END.search(preceding) and not (word and word.group(1) in _KEYWORDS_BEFORE_OPERAND):
            continue  # a comparison `a < b` or a bitwise `a & b`, after an operand
        result.append(code[position : found.start()])
        position = found.end()
    result.append(code[position:])
    return "".join(result)


def _code(text: str) -> str:
    """The text with comments and the contents of strings blanked, same length."""
    return blanked(text, Language.PYTHON)


def _statement_end(lines: list[str], index: int) -> int:
    """The last line of the logical line that starts at index (open brackets and backslashes continue it)."""
    depth = 0
    end = index
    while end < len(lines):
        code = _code(lines[end])
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if ('"""' in lines[end] or "'''" in lines[end]) and lines[end].count('"""') % 2 + lines[end].count("'''") % 2:
            return end  # a multi-line string starts here: left to the string tracking
        if depth <= 0 and not code.rstrip().endswith("\\"):
            return end
        end += 1
    return len(lines) - 1


def _block_end(lines: list[str], header_start: int, header_end: int) -> int:
    """The last line of the indented block after a header, or the header's last line when none follows."""
    indent = _indent_of(lines[header_start])
    last = header_end
    for index in range(header_end + 1, len(lines)):
        if not lines[index].strip():
            continue
        if _indent_of(lines[index]) <= indent:
            break
        last = index
    return last


def _indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _name_paren(text: str) -> int | None:
    """Where the parameter list opens: the first top-level `(` right after a name that is not a C keyword."""
    code = _code(text)
    for found in re.finditer(r"(" + _IDENT + r")\s*\(", code):
        if found.group(1) not in _DECLARATION_WORDS and _depth_at(code, found.start()) == 0:
            return found.end() - 1
    return None


def _depth_at(code: str, position: int) -> int:
    prefix = code[:position]
    return sum(prefix.count(c) for c in "([{") - sum(prefix.count(c) for c in ")]}")


def _matching_paren(text: str, opening: int) -> int | None:
    code = _code(text)
    depth = 0
    for index in range(opening, len(code)):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(code[index], 0)
        if depth == 0:
            return index
    return None


def _split_top_level(text: str) -> list[str]:
    """Text split at its top-level commas (strings and brackets kept whole)."""
    parts, start = [], 0
    for index in _at_top_level(_code(text), ","):
        parts.append(text[start:index])
        start = index + 1
    parts.append(text[start:])
    return parts


def _at_top_level(code: str, wanted: str) -> Iterator[int]:
    """Where the character wanted stands outside every bracket of code."""
    depth = 0
    for index, char in enumerate(code):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == wanted and depth == 0:
            yield index


def _top_level_equals(text: str) -> int | None:
    """Where the first top-level `=` that is an assignment (not ==, <=, >=, !=) is."""
    code = _code(text)
    for index in _at_top_level(code, "="):
        neighbours = code[index - 1 : index] + code[index + 1 : index + 2]
        if "=" not in neighbours and code[index - 1 : index] not in ("<", ">", "!"):
            return index
    return None


def _comment_newlines(tail: str) -> str:
    return "\n" * tail.count("\n")
