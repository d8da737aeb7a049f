"""Rust sources (GPU stacks such as candle and mistral.rs, CPU-SIMD crates): what in a changed `.rs` file picks a
kernel, read from rust_scan.py's lines the way native_*.py reads C / C++.

- Compile-time gates: a `#[cfg(...)]` / `#![cfg(...)]` / `#[cfg_attr(...)]` attribute (also the lines of a
  `#[cfg(any(` spread over several), a `cfg!(...)` test, or an `is_x86_feature_detected!("avx2")`-like runtime
  test, that a hunk removes or adds and does not add or remove again: a branch condition named by the item it
  gates (`mod avx`, `vec_dot_f32`) or the function it is in; not when that item is added or removed with it (new
  code). Rust's `#[cfg]` is C's `#if`: which SIMD or GPU path is built.
- Environment reads: `env::var("X")`, `env::var_os("X")`, `option_env!("X")`, `env!("X")` added, removed or
  rewritten (another default, another comparison) are env gates of X.
- Branch tests (changed_branches.py's rows of last resort, for a file no rule above gave a row): the `if` / `else if`
  / `while` / `match` heads and the `pattern =>` arms a hunk removes or adds in a function (a `match dtype {
  DType::F16 => ... }` arm is a dispatch table); not in a `macro_rules!`.
Test code is not read: `#[cfg(test)]` items here, test files (`tests.rs`, `*_test.rs`) by file_roles.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bisector.analysis.changed_branches import BranchChange
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_dispatch import diff_env_reads
from bisector.analysis.rules import produce
from bisector.analysis.rust_scan import ITEM, RustSource

RUST_SUFFIXES = (".rs",)
_GATE = re.compile(
    r"#!?\[\s*cfg(?:_attr)?\s*\(|\bcfg!\s*\(|\bis_\w+_feature_detected!\s*\(|"
    r"^\s*(?:any|all|not)?\s*\(?\s*(?:target_feature|target_arch|target_os|target_vendor|feature)\s*=\s*\""
)
_ENV = re.compile(r"\b(?:env::var(?:_os)?|option_env!|env!)\s*\(\s*\"(?P<name>[A-Za-z_]\w*)\"")
_TEST = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|while|match)\b(?!\s+let\b)|^\s*[^/\s][^=]*=>")
MAX_ITEM_GAP = 40  # lines between a gate and the item it gates (the other attributes of a multi-line #[cfg(any(...))])


def rust_rows(path: str, old: RustSource | None, new: RustSource | None, hunks: Sequence[Hunk]) -> list[Finding]:
    """The rows of a changed Rust file: its gates and environment reads that differ."""
    was, now = old or _EMPTY, new or _EMPTY
    return produce("rust_gates", _gate_rows, path, was, now, hunks) + produce(
        "rust_env_reads", _env_rows, path, was, now
    )


def rust_branch_changes(path: str, old: RustSource, new: RustSource, hunks: Sequence[Hunk]) -> list[BranchChange]:
    """The functions whose branch tests or match arms the hunks remove or add (not moved within the hunk)."""
    found: dict[str, list[tuple[bool, str, int]]] = {}  # function -> (removed?, text, 1-based line) of each test
    for removed, added in _changed_lines(old, new, hunks, _TEST):
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


def _changed_lines(
    old: RustSource, new: RustSource, hunks: Sequence[Hunk], pattern: re.Pattern[str]
) -> list[tuple[list[int], list[int]]]:
    """Per hunk, the indexes of the removed and of the added code lines that match pattern (not test code), less
    those whose text the hunk's other side has too (a line moved, or re-indented)."""
    out = []
    for hunk in hunks:
        removed = _matching(old, range(hunk.old_lo, hunk.old_hi), pattern)
        added = _matching(new, range(hunk.new_lo, hunk.new_hi), pattern)
        was = {old.lines[i].strip() for i in removed}
        now = {new.lines[i].strip() for i in added}
        out.append(
            (
                [i for i in removed if old.lines[i].strip() not in now],
                [i for i in added if new.lines[i].strip() not in was],
            )
        )
    return out


def _matching(source: RustSource, indexes: range, pattern: re.Pattern[str]) -> list[int]:
    return [i for i in indexes if i < len(source.code) and not source.in_tests[i] and pattern.search(source.code[i])]


def _gate_rows(path: str, old: RustSource, new: RustSource, hunks: Sequence[Hunk]) -> list[Finding]:
    first: dict[str, dict[int, str]] = {}  # gated name -> side (0 removed, 1 added) -> its first changed gate line
    lines_at: dict[str, int] = {}
    for removed, added in _changed_lines(old, new, hunks, _GATE):
        for side, source, other, changes in ((0, old, new, removed), (1, new, old, added)):
            for index in changes:
                name = _gated(source, index)
                if name is None or not _defined(other, name):  # an item added or removed with its gate: new code
                    continue
                first.setdefault(name, {}).setdefault(side, source.lines[index].strip())
                if side == 1:
                    lines_at.setdefault(name, index + 1)
    return [
        Finding(
            FindingKind.BRANCH_CONDITION,
            path,
            name,
            "cfg gate",
            sides.get(0),
            sides.get(1),
            line=lines_at.get(name),
            detail="a compile-time or CPU-feature gate in Rust: which path is built or taken",
        )
        for name, sides in first.items()
    ]


def _gated(source: RustSource, index: int) -> str | None:
    """What a gate line gates: the item after its attributes (`mod avx`, `vec_dot`, on its own line or the same),
    else the function it is in, else the module (None: a gate of test code)."""
    code = source.code[index]
    if "cfg!" not in code and "_feature_detected!" not in code:
        rest = code[code.rfind("]") + 1 :] if "]" in code else ""
        for following in [rest, *source.code[index + 1 : index + 1 + MAX_ITEM_GAP]]:
            text = following.strip()
            if not text or text.startswith(("#", ")", "]")) or _GATE.search(following):
                continue  # the gate's other attributes, or the rest of one spread over lines
            item = ITEM.match(text)
            if item is None:
                break
            name = (item["name"] or "").rstrip(":")
            return name if item["what"] == "fn" and name else f"{item['what']} {name}".strip()
    return source.function[index] or "module"


def _defined(source: RustSource, name: str) -> bool:
    """Whether the item or function a gate is named by is in this version of the file too."""
    return name == "module" or name in source.items or f"fn {name}" in source.items


def _env_rows(path: str, old: RustSource, new: RustSource) -> list[Finding]:
    return diff_env_reads(path, _env_reads(old), _env_reads(new), detail="environment read in Rust")


def _env_reads(source: RustSource) -> dict[str, list[str]]:
    reads: dict[str, list[str]] = {}
    for line, code, tests in zip(source.lines, source.code, source.in_tests, strict=True):
        if "env" in code and not tests:  # a read in a comment is blanked in code
            for match in _ENV.finditer(line):
                reads.setdefault(match["name"], []).append(line.strip().rstrip(" ,;{}"))
    return reads


_EMPTY = RustSource([], [], [], [], frozenset())
