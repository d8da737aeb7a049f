"""One scanner of source text for every language a reader reads as text: where its comments and string literals are,
and the text with them blanked as spaces (newlines kept, so line and column numbers stay). Python is read with ast.

    Language.C        // and /* */ comments; "..." and '...' literals, which end at their line's end (C, C++, CUDA)
    Language.RUST     // and nested /* */ comments; "...", b"...", r#"..."# strings; 'c' chars, not 'a lifetimes
    Language.CMAKE    # and #[[ ]] comments; "..." arguments
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Language(Enum):
    C = "c"
    RUST = "rust"
    CMAKE = "cmake"


@dataclass(frozen=True)
class Span:
    """A comment or a literal: text[start:end], its contents text[body_start:body_end] (without the quotes)."""

    start: int
    end: int
    comment: bool
    body_start: int
    body_end: int


def _quoted(quote: str, one_line: bool) -> str:
    """A literal that ends at its quote (escapes skipped), at its line's end when one_line, or at the text's end."""
    inside = rf"(?:\\.|[^{quote}\\\n])*" if one_line else rf"(?:\\.|[^{quote}\\])*"
    return rf"{quote}{inside}(?:{quote}|(?=\n)|\Z)" if one_line else rf"{quote}{inside}(?:{quote}|\Z)"


# Each a whole comment or literal, the first that starts leftmost: a comment marker inside a string is no comment.
_TOKENS = {
    Language.C: re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)|" + _quoted('"', True) + "|" + _quoted("'", True), re.S),
    Language.CMAKE: re.compile(r"#\[(=*)\[.*?(?:\]\1\]|\Z)|#[^\n]*|" + _quoted('"', False), re.S),
}  # fmt: skip
_RUST_START = re.compile(r"//|/\*|(?<![\w])b?r(#*)\"|\"|'")
_RUST_CHAR = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|.)|[^\\'\n])'")
_RUST_STRING_REST = re.compile(r'(?:\\.|[^"\\])*(")?', re.S)
_NOT_NEWLINE = re.compile(r"[^\n]")


def spans(text: str, language: Language) -> list[Span]:
    """The comments and literals of text, in order."""
    if language is Language.RUST:
        return _rust_spans(text)
    found = []
    for token in _TOKENS[language].finditer(text):
        start, end, value = token.start(), token.end(), token.group()
        if value.startswith(("#", "//", "/*")):
            found.append(Span(start, end, True, start, end))
            continue
        closed = len(value) >= 2 and value.endswith(value[0])
        found.append(Span(start, end, False, start + 1, end - 1 if closed else end))
    return found


def blanked(text: str, language: Language, *, strings: bool = True) -> str:
    """text with its comments, and (strings) the contents of its literals, as spaces; quotes and newlines kept."""
    out, position = [], 0
    for span in spans(text, language):
        if not span.comment and not strings:
            continue
        out += [text[position : span.body_start], _NOT_NEWLINE.sub(" ", text[span.body_start : span.body_end])]
        position = span.body_end
    out.append(text[position:])
    return "".join(out)


def c_literal_end(text: str, start: int) -> int:
    """The end of the C string or char literal whose quote is at start: after its closing quote, or at its line's
    end (an escaped newline continues it) or the text's end when it is not closed."""
    literal = _TOKENS[Language.C].match(text, start)
    return literal.end() if literal else len(text)


def _rust_spans(text: str) -> list[Span]:
    found, position = [], 0
    while (token := _RUST_START.search(text, position)) is not None:
        start, value = token.start(), token.group()
        if value == "//":
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            found.append(Span(start, end, True, start, end))
        elif value == "/*":
            end = _nested_comment_end(text, start)
            found.append(Span(start, end, True, start, end))
        elif value == "'":
            char = _RUST_CHAR.match(text, start)
            end = char.end() if char else start + 1  # a lifetime ('a) is code
            if char:
                found.append(Span(start, end, False, start + 1, end - 1))
        elif (hashes := token.group(1)) is not None:  # raw: no escapes, ends at a quote followed by as many #s
            close = text.find('"' + hashes, token.end())
            end = len(text) if close < 0 else close + 1 + len(hashes)
            found.append(Span(start, end, False, token.end(), close if close >= 0 else len(text)))
        else:  # "..." or b"..."
            closing = _RUST_STRING_REST.match(text, token.end())
            assert closing is not None  # the pattern matches the empty string
            end = closing.end()
            found.append(Span(start, end, False, token.end(), end - 1 if closing.group(1) else end))
        position = max(end, start + 1)
    return found


def _nested_comment_end(text: str, start: int) -> int:
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
