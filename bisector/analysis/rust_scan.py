"""One pass over a Rust source for rust_source.py: its lines as git counts them, the same lines with comments and
the contents of string and char literals blanked (so that a `=>` or a brace in a string is no code), and which
function each line is in."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bisector.analysis.source_text import Language, blanked

_BLOCK_EDGE = re.compile(r"[{};]")
_FN = re.compile(r"\bfn\s+(?P<name>[A-Za-z_]\w*)")


@dataclass(frozen=True)
class RustSource:
    lines: list[str]  # the file split at "\n", as git numbers its lines
    code: list[str]  # the same lines, comments and the contents of string and char literals blanked
    function: list[str | None]  # the fn whose body holds each line (None outside one)


def scan_rust(text: str) -> RustSource:
    code = blanked(text, Language.RUST)
    lines, code_lines = text.split("\n"), code.split("\n")
    function: list[str | None] = []
    stack: list[str | None] = []  # the open blocks: a fn's name, None for any other block
    header = ""  # the code since the last brace or semicolon: what a block that opens next belongs to
    for line in code_lines:
        function.append(next((name for name in reversed(stack) if name), None))
        start = 0
        for edge in _BLOCK_EDGE.finditer(line):
            header += line[start : edge.start()]
            start = edge.end()
            if edge.group() == "{":
                heads = list(_FN.finditer(header))
                stack.append(heads[-1]["name"] if heads else None)
            elif edge.group() == "}" and stack:
                stack.pop()
            header = ""
        header += line[start:] + "\n"
    return RustSource(lines, code_lines, function)
