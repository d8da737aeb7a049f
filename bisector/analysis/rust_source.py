"""Rust sources (GPU stacks such as candle and mistral.rs, CPU-SIMD crates), read from rust_scan.py's lines: the
branch tests of changed_branches.py's rows of last resort, the `if` / `else if` / `while` / `match` heads and the
`pattern =>` arms a hunk removes or adds in a function (a `match dtype { DType::F16 => ... }` arm is a dispatch
table). Test files (`tests.rs`, `*_test.rs`) are not read (file_roles.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bisector.analysis.changed_branches import BranchChange
from bisector.analysis.rust_scan import RustSource
from bisector.vocab.gitdiff import Hunk, unmoved

RUST_SUFFIXES = (".rs",)
_TEST = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|while|match)\b(?!\s+let\b)|^\s*[^/\s][^=]*=>")


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
