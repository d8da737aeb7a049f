"""Rust sources (GPU stacks such as candle and mistral.rs, CPU-SIMD crates), read in one pass (scan_rust: the lines as
git numbers them, the same lines with comments and the contents of string and char literals blanked, so that a `=>` or
a brace in a string is no code, and the function each line is in): the branch tests of changed_branches.py's rows of
last resort, the `if` / `else if` / `while` / `match` heads and the `pattern =>` arms a hunk removes or adds in a
function (a `match dtype { DType::F16 => ... }` arm is a dispatch table). Test files (`tests.rs`, `*_test.rs`) are not
read (file_roles.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bisector.analysis.changed_branches import BranchChange
from bisector.analysis.source_text import Language, blanked
from bisector.vocab.gitdiff import Hunk, unmoved

RUST_SUFFIXES = (".rs",)
_TEST = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|while|match)\b(?!\s+let\b)|^\s*[^/\s][^=]*=>")
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


def rust_branch_changes(path: str, old: RustSource, new: RustSource, hunks: Sequence[Hunk]) -> list[BranchChange]:
    """The functions whose branch tests or match arms the hunks remove or add (not moved within the hunk)."""
    found: dict[str, list[tuple[bool, str, int]]] = {}  # function -> (removed?, text, 1-based line) of each test
    for removed, added in _changed_lines(old, new, hunks):
        for gone, source, changes in ((True, old, removed), (False, new, added)):
            for index in changes:
                function = source.function[index]
                if function:
                    found.setdefault(function, []).append((gone, source.lines[index].strip(), index + 1))
    changes_out = []
    for function, tests in found.items():
        before = next((text for gone, text, _ in tests if gone), None)
        after = next(((text, line) for gone, text, line in tests if not gone), (None, None))
        changes_out.append(BranchChange(path, function, before, after[0], after[1], len(tests)))
    return changes_out


def _changed_lines(old: RustSource, new: RustSource, hunks: Sequence[Hunk]) -> list[tuple[list[int], list[int]]]:
    """Per hunk, the indexes of the removed and of the added branch-test lines, less as many of each text as the
    hunk's other side has (a line moved, or re-indented)."""
    out = []
    for hunk in hunks:
        removed, added = _tests(old, range(hunk.old_lo, hunk.old_hi)), _tests(new, range(hunk.new_lo, hunk.new_hi))
        out.append(unmoved(removed, added, old.lines, new.lines))
    return out


def _tests(source: RustSource, indexes: range) -> list[int]:
    return [i for i in indexes if i < len(source.code) and _TEST.search(source.code[i])]
