"""Where the function bodies of a C / C++ / CUDA file are: a brace after a `)` that opens no struct, class or
namespace opens one (its outermost braces), read from the comment-stripped text with preprocessor lines blanked."""

from __future__ import annotations

import bisect
import re

from bisector.analysis.native_scope import TEMPLATE_PARAMETERS

_PREPROCESSOR = re.compile(r"^[ \t]*#[^\n]*", re.M)
_DELIMITER = re.compile(r"[{};]")
_AGGREGATE = re.compile(r"\b(?:struct|class|namespace|union|enum)\b")


def function_bodies(stripped: str) -> list[tuple[int, int]]:
    """(start, end) of the outermost function bodies: a brace after a ) that opens no struct, class or namespace."""
    bodies: list[tuple[int, int]] = []
    stack: list[bool] = []  # per open brace: inside a function body
    last_delimiter, opened = -1, 0
    code = _PREPROCESSOR.sub(lambda match: " " * len(match[0]), stripped)
    for delimiter in _DELIMITER.finditer(code):
        index = delimiter.start()
        if delimiter[0] == "{":
            head = code[last_delimiter + 1 : index]
            inside = bool(stack and stack[-1])
            if not inside and ")" in head and not _AGGREGATE.search(TEMPLATE_PARAMETERS.sub(" ", head)):
                opened = index
                inside = True
            stack.append(inside)
        elif delimiter[0] == "}" and stack and stack.pop() and not (stack and stack[-1]):
            bodies.append((opened, index))  # the outermost function body closes
        last_delimiter = index
    return bodies


def inside_bodies(bodies: list[tuple[int, int]], position: int) -> bool:
    at = bisect.bisect_right(bodies, (position, position)) - 1
    return at >= 0 and bodies[at][0] <= position <= bodies[at][1]
