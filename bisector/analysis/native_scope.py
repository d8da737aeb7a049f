"""Where a line of C / C++ / CUDA is: the function whose body holds it (its name as written in its head,
`GemmNode::ComputeWarpPartition`, and whether it is device code), found by walking up the comment-stripped lines
and counting braces. Namespaces, classes, loops, lambdas passed to macros and plain blocks are walked through."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

MAX_SCOPE_LINES = 400  # how far above a line its function head is looked for
MAX_HEAD_LINES = 60  # a function head spread over this many lines at most (one parameter a line)

_FUNCTION_HEAD = re.compile(
    r"(?P<name>(?:[A-Za-z_][\w:]*::)?operator\s*(?:\(\)|\[\]|[^\s\w()]{1,3})|~?[A-Za-z_][\w:~]*)"  # operator*()
    r"\s*\((?:[^;{}]|\{[^;{}]*\})*\)[^;{}()]*\{\s*$"  # a default argument may be braced: `cfg = StreamConfig{}`
)
_CONTROL = frozenset(
    {"if", "for", "while", "switch", "catch", "sizeof", "decltype", "return", "defined", "constexpr", "else", "do"}
)
_ATTRIBUTES = re.compile(r"\b(?:__launch_bounds__|__attribute__|alignas|__declspec)\s*\((?:[^()]|\([^()]*\))*\)")
_DEVICE = re.compile(
    r"\b(?:__global__|__device__|[A-Z_]*DEVICE[A-Z_]*)\b|"  # CK_TILE_DEVICE, KITTENS_DEVICE
    r"\[\[\s*kernel\s*\]\]|\bkernel\s+void\b|\bMETAL_FUNC\b|"  # Metal: a kernel, mlx's helper macro
    r"\b__kernel\b"  # OpenCL C: a kernel
)


@dataclass(frozen=True)
class Scope:
    function: str  # the name as its head writes it
    device: bool  # a __global__ / __device__ function: kernel code
    opening: str  # its head, joined onto one line
    line: int  # the index of the line whose brace opens the function's body


def enclosing_function(lines: list[str], index: int) -> Scope | None:
    """The function whose body holds line index, or None at file, namespace or class scope."""
    for earlier in _block_openings(lines, index):
        opening = _ATTRIBUTES.sub(" ", joined_head(lines, earlier))
        function = _FUNCTION_HEAD.search(opening)
        if function is not None and function["name"] not in _CONTROL and not function["name"].isupper():
            return Scope(function["name"], _DEVICE.search(opening) is not None, opening, earlier)
    return None  # only a namespace, a class, a loop, a macro's lambda or a plain block holds it


def _block_openings(lines: list[str], index: int) -> Iterator[int]:
    """The lines whose braces open the blocks around line index, innermost first (preprocessor lines not counted)."""
    depth = 0
    for earlier in range(index - 1, max(index - MAX_SCOPE_LINES, -1), -1):
        line = lines[earlier]
        if line.lstrip().startswith("#"):
            continue
        depth += line.count("}") - line.count("{")
        if depth < 0:
            yield earlier
            depth = 0


def function_body(lines: list[str], opening: int) -> list[str]:
    """The lines of the function whose body opens at the last brace of line opening, to the brace that closes it
    (MAX_SCOPE_LINES at most)."""
    depth = 0
    for index in range(opening, min(opening + MAX_SCOPE_LINES, len(lines))):
        text = lines[index] if index > opening else lines[index][lines[index].rfind("{") :]
        depth += text.count("{") - text.count("}")
        if depth <= 0:
            return lines[opening : index + 1]
    return lines[opening : opening + MAX_SCOPE_LINES]


def joined_head(lines: list[str], index: int) -> str:
    """The line that opens a block, joined with the lines above it back to the previous statement's end (blank
    lines, comments blanked, are passed over)."""
    start = head_start(lines, index)
    return " ".join(text for line in lines[start : index + 1] if (text := line.strip()))


def head_start(lines: list[str], index: int, max_lines: int = MAX_HEAD_LINES) -> int:
    """The first line of the statement or head that line index ends: back to the line after the previous `;`, `{`
    or `}` at a line's end or a preprocessor line, over at most max_lines lines."""
    start = index
    for earlier in range(index - 1, max(index - max_lines, -1), -1):
        text = lines[earlier].strip()
        if text.endswith((";", "}", "{")) or text.startswith("#"):
            break
        start = earlier  # blank lines (and blanked comments) too: they belong to no other statement
    return start


TEMPLATE_PARAMETERS = re.compile(r"\btemplate\s*<(?:[^<>]|<[^<>]*>)*>")  # `template <class T>` names no class
CLASS_HEAD = re.compile(r"\b(?:struct|class)\s+(?:alignas\s*\([^)]*\)\s*)?(\w+)[^;(]*\{\s*$")  # its name: group 1


def enclosing_heads(lines: list[str], index: int) -> Iterator[str]:
    """The heads of the blocks around line index, innermost first (a class, a namespace, ...), each joined over its
    lines and without its template parameter list."""
    for earlier in _block_openings(lines, index):
        yield TEMPLATE_PARAMETERS.sub(" ", joined_head(lines, earlier))


def defined_in(function: str, lines: list[str]) -> bool:
    """Whether lines (the other version of a file) have a function of that name (its last `::` part followed by
    `(`)."""
    pattern = re.compile(rf"\b{re.escape(function.split('::')[-1])}\s*\(")
    return any(pattern.search(line) for line in lines)
