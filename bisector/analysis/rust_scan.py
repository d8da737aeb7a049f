"""One pass over a Rust source for rust_source.py: its lines as git counts them, the same lines with comments and
the contents of string and char literals blanked (so that a `=>` or a brace in a string is no code), which function
each line is in, which lines are test code, and the items the file defines."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LITERAL_OR_COMMENT = re.compile(r"//|/\*|(?<![\w])b?r(#*)\"|\"|'")
_CHAR = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|.)|[^\\'\n])'")
_BLOCK_EDGE = re.compile(r"[{};]")
_FN = re.compile(r"\bfn\s+(?P<name>[A-Za-z_]\w*)")
ITEM = re.compile(
    r"(?:^|(?<=[\s;{}\]]))(?:pub(?:\([\w:\s]+\))?\s+)?(?:(?:const|async|unsafe|extern\s*\"[^\"]*\")\s+)*"
    r"(?P<what>fn|mod|struct|enum|trait|impl|const|static|type|use)\b\s*(?:<[^>]*>\s*)?(?P<name>[A-Za-z_][\w:]*)?"
)


@dataclass(frozen=True)
class RustSource:
    lines: list[str]  # the file split at "\n", as git numbers its lines
    code: list[str]  # the same lines, comments and the contents of string and char literals blanked
    function: list[str | None]  # the fn whose body holds each line (None outside one, in a macro_rules!, in tests)
    in_tests: list[bool]  # each line: inside a #[cfg(test)] item
    items: frozenset[str]  # "fn vec_dot", "mod avx", "const BLOCK", ...: what the file defines


def scan_rust(text: str) -> RustSource:
    code = _blanked(text)
    lines, code_lines = text.split("\n"), code.split("\n")
    function: list[str | None] = []
    in_tests: list[bool] = []
    stack: list[tuple[str, str | None]] = []  # the open blocks: (fn | macro | tests | other, the fn's name)
    header = ""  # the code since the last brace or semicolon: what a block that opens next belongs to
    for line in code_lines:
        kinds = {kind for kind, _ in stack}
        inner = next((name for kind, name in reversed(stack) if kind == "fn"), None)
        function.append(None if kinds & {"macro", "tests"} else inner)
        in_tests.append("tests" in kinds)
        start = 0
        for edge in _BLOCK_EDGE.finditer(line):
            header += line[start : edge.start()]
            start = edge.end()
            if edge.group() == "{":
                stack.append(_block(header))
            elif edge.group() == "}" and stack:
                stack.pop()
            header = ""
        header += line[start:] + "\n"
    items = frozenset(f"{m['what']} {m['name'] or ''}".strip() for m in ITEM.finditer(code))
    return RustSource(lines, code_lines, function, in_tests, items)


def _block(header: str) -> tuple[str, str | None]:
    if "macro_rules!" in header:
        return ("macro", None)
    if "cfg(test)" in header.replace(" ", ""):
        return ("tests", None)
    heads = list(_FN.finditer(header))
    return ("fn", heads[-1]["name"]) if heads else ("other", None)


def _blanked(text: str) -> str:
    """text with comments and literal contents as spaces (quotes and newlines kept: lines and columns stay)."""
    out = list(text)

    def blank(start: int, end: int) -> None:
        for i in range(start, min(end, len(out))):
            if out[i] != "\n":
                out[i] = " "

    position = 0
    while (found := _LITERAL_OR_COMMENT.search(text, position)) is not None:
        start, token = found.start(), found.group()
        if token == "//":
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            blank(start, end)
        elif token == "/*":
            end = _block_comment_end(text, start)
            blank(start, end)
        elif token == "'":
            char = _CHAR.match(text, start)
            end = char.end() if char else start + 1  # a lifetime ('a) is code
            if char:
                blank(start + 1, end - 1)
        else:  # a string: "...", b"...", r#"..."#
            hashes = found.group(1)
            if hashes is not None:  # raw: no escapes, ends at a quote followed by as many #s
                close = text.find('"' + hashes, found.end())
                end = len(text) if close < 0 else close + 1 + len(hashes)
                blank(found.end(), close if close >= 0 else len(text))
            else:
                end = _string_end(text, found.end())
                blank(found.end(), end - 1)
        position = max(end, start + 1)
    return "".join(out)


def _string_end(text: str, start: int) -> int:
    """The index after the closing quote of a string whose contents begin at start (escapes skipped)."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    return len(text)


def _block_comment_end(text: str, start: int) -> int:
    depth, i = 0, start
    while i < len(text):
        if text.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif text.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    return len(text)
