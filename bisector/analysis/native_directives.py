"""C / C++ preprocessor blocks read as text: where an `#if` continued over lines starts, the `#if` of an `#else`, and
whether an `#else` of an arch test picks another path for the other arches (native_condition_lines.py labels such
an `#else`, native_conditions.py names the rows by the `#if`)."""

from __future__ import annotations

import re

from bisector.analysis.native_scope import enclosing_function

MAX_DIRECTIVE_LINES = 64  # an #if continued with backslashes (one arch a line: `defined(__gfx1030__) || \`)
MAX_GUARD_LINES = 400  # a guarded kernel body runs this long at most
PP_OPEN = re.compile(r"^\s*#\s*if")
PP_END = re.compile(r"^\s*#\s*endif\b")
PP_ELSE = re.compile(r"^\s*#\s*else\b")
IF_ZERO = re.compile(r"^\s*#\s*if\s+0\s*$")  # `#if 0` around code: it is built no more (or again, when removed)
# an object-like macro defined with a value (`#define WARP_SIZE 32`; not `#define MAX(a, b) ...`), matched in a line or
# found in a whole text (re.M: blanks, not \s, so that neither name nor value runs on into the next line)
DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(?P<name>[A-Za-z_]\w*)(?!\()[ \t]+(?P<value>\S.*?)[ \t]*$", re.M)
_MACRO_SET = re.compile(r"^\s*#\s*(?:define|undef)\b")


def directive_start(lines: list[str], index: int) -> int:
    """The line opening the `#if` / `#elif` that line index continues (`|| defined(__gfx90a__) \\` after a `#if
    defined(__gfx908__) \\`), or the `#if` of an `#else`, else index."""
    if PP_ELSE.match(lines[index]):
        return opening_if(lines, index)
    start = index
    while start > 0 and index - start < MAX_DIRECTIVE_LINES and lines[start - 1].rstrip().endswith("\\"):
        start -= 1
    return start if start != index and PP_OPEN.match(lines[start]) else index


def directive_end(lines: list[str], index: int) -> int:
    """The last line of the directive opening at line index: the lines that continue it after a backslash."""
    end = index
    while end + 1 < len(lines) and end - index < MAX_DIRECTIVE_LINES - 1 and lines[end].rstrip().endswith("\\"):
        end += 1
    return end


def opening_if(lines: list[str], index: int) -> int:
    """The `#if` / `#ifdef` line whose block the `#else` / `#elif` at line index continues, else index."""
    depth = 0
    for earlier in range(index - 1, max(index - MAX_GUARD_LINES, -1), -1):
        if PP_END.match(lines[earlier]):
            depth += 1
        elif PP_OPEN.match(lines[earlier]):
            if depth == 0:
                return earlier
            depth -= 1
    return index


def else_of_arch_test(lines: list[str], index: int, arch_words: re.Pattern[str]) -> bool:
    """Line index is the `#else` of an `#if` that tests the arch and the other arches' path: in a function, any
    code; at file scope, a macro it defines or undefines (`#undef ROCRAND_ENABLE_INLINE_ASM`) for the code that tests
    it (a struct or function it declares is new code for those arches, compared where it is used)."""
    if not PP_ELSE.match(lines[index]) or (opening := opening_if(lines, index)) == index:
        return False
    test = " ".join(lines[opening : directive_end(lines, opening) + 1])
    if arch_words.search(test) is None:
        return False
    return enclosing_function(lines, index) is not None or _sets_macro(lines, index)


def _sets_macro(lines: list[str], index: int) -> bool:
    """The block after line index (an `#else`) defines or undefines a macro before its `#endif`."""
    depth = 0
    for text in lines[index + 1 : index + 1 + MAX_GUARD_LINES]:
        if PP_OPEN.match(text):
            depth += 1
        elif PP_END.match(text):
            if depth == 0:
                return False
            depth -= 1
        elif _MACRO_SET.match(text):
            return True
    return False
