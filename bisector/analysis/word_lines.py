"""Walks that enter only the parts of a tree on lines that hold a word a scan needs. A scan whose finds all name
such a word (an env read names environ or getenv, a registry call names an option) need not walk a long class's
other methods: a subtree none of whose lines holds the word holds no find. Likewise a regex whose matches all hold
one of some words is searched only in a text that holds one (holds_match).

The lines must number the tree's (ParsedModule.numbered)."""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable

from bisector.analysis.code_shape import first_line


def holds_match(text: str, words: Iterable[str], pattern: re.Pattern[str]) -> bool:
    """Whether pattern, each of whose matches holds one of the words, matches in text; searched only where one of the
    words is (`in` is cheap next to a regex over a long text, and most texts hold none)."""
    return any(word in text for word in words) and pattern.search(text) is not None


def lines_holding(lines: list[str], node: ast.AST, holds: Callable[[str], bool]) -> list[int]:
    """The numbers, in order, of node's lines (decorators included) for which holds is true."""
    first, last = _span(node)
    return [number for number in range(first, min(last, len(lines)) + 1) if holds(lines[number - 1])]


def on_lines(node: ast.AST, numbers: list[int]) -> bool:
    """Whether any of the sorted line numbers is one of node's lines; a node without a position may be anywhere."""
    if getattr(node, "lineno", None) is None:
        return True
    first, last = _span(node)
    index = bisect_left(numbers, first)
    return index < len(numbers) and numbers[index] <= last


def _span(node: ast.AST) -> tuple[int, int]:
    lineno: int = getattr(node, "lineno", 1)
    end: int | None = getattr(node, "end_lineno", None)
    return first_line(node), end or lineno
