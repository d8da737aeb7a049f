"""Rust sources (GPU stacks such as candle and mistral.rs, CPU-SIMD crates): what in a changed `.rs` file picks a
kernel, read as text the way native_*.py reads C / C++.

- Compile-time gates: a `#[cfg(...)]` / `#![cfg(...)]` / `#[cfg_attr(...)]` attribute (also the lines of a
  `#[cfg(any(` spread over several), a `cfg!(...)` test, or an `is_x86_feature_detected!("avx2")`-like runtime
  test, that a hunk removes or adds and does not add or remove again: a branch condition named by the item it
  gates (`mod avx`, `fn vec_dot_f32`) or the function it is in. Rust's `#[cfg]` is C's `#if`: which SIMD or GPU
  path is built.
- Environment reads: `env::var("X")`, `env::var_os("X")`, `option_env!("X")`, `env!("X")` added, removed or
  rewritten (another default, another comparison) are env gates of X.
- Constants: a `const` / `static` whose value changes (`const BLOCK_SIZE: usize = 256;`) is a threshold row.
- Branch tests (changed_branches.py's rows of last resort, for a file no rule above gave a row): the `if` / `else if`
  / `while` / `match` heads and the `pattern =>` arms a hunk removes or adds in a function (a `match dtype {
  DType::F16 => ... }` arm is a dispatch table).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bisector.analysis.changed_branches import BranchChange
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_dispatch import diff_env_reads

RUST_SUFFIXES = (".rs",)
_GATE = re.compile(
    r"#!?\[\s*cfg(?:_attr)?\s*\(|\bcfg!\s*\(|\bis_\w+_feature_detected!\s*\(|"
    r"^\s*(?:any|all|not)?\s*\(?\s*(?:target_feature|target_arch|target_os|target_vendor|feature)\s*=\s*\""
)
_ENV = re.compile(r"\b(?:env::var(?:_os)?|option_env!|env!)\s*\(\s*\"(?P<name>[A-Za-z_]\w*)\"")
_CONST = re.compile(
    r"^\s*(?:pub(?:\([\w:]+\))?\s+)?(?:const|static)\s+(?:mut\s+)?(?P<name>[A-Z_][A-Z0-9_]*)\s*:[^=]+=\s*"
    r"(?P<value>[^;]+);"
)
_TEST = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|while|match)\b(?!\s+let\b)|^\s*[^/\s][^=]*=>")
_FN = re.compile(r"\bfn\s+(?P<name>[A-Za-z_]\w*)")
_ITEM = re.compile(r"^\s*(?:pub(?:\([\w:]+\))?\s+)?(?:unsafe\s+)?(?P<what>fn|mod|use|impl|struct|enum|const|static)\b"
                   r"\s*(?:<[^>]*>\s*)?(?P<name>[\w:]+)?")  # fmt: skip
_COMMENT = re.compile(r"^\s*//")
MAX_ITEM_GAP = 40  # lines between a gate and the item it gates (the other attributes of a multi-line #[cfg(any(...))])
MAX_FUNCTION_LINES = 2000  # how far up a line's function head is looked for


def rust_rows(path: str, old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk]) -> list[Finding]:
    """The rows of a changed Rust file: its gates, environment reads and constants that differ."""
    return (
        _gate_rows(path, old_lines, new_lines, hunks)
        + _env_rows(path, old_lines, new_lines)
        + _const_rows(path, old_lines, new_lines)
    )


def rust_branch_changes(
    path: str, old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk]
) -> list[BranchChange]:
    """The functions whose branch tests or match arms the hunks remove or add (not moved within the hunk)."""
    found: dict[str, list[tuple[bool, str, int]]] = {}  # function -> (removed?, text, 1-based line) of each test
    for removed, added in _changed_lines(old_lines, new_lines, hunks, _TEST):
        for gone, lines, changes in ((True, old_lines, removed), (False, new_lines, added)):
            for index in changes:
                function = _function(lines, index)
                if function:
                    found.setdefault(function, []).append((gone, lines[index].strip(), index + 1))
    changes_out = []
    for function, tests in found.items():
        before = next((text for gone, text, _ in tests if gone), None)
        after = next(((text, line) for gone, text, line in tests if not gone), (None, None))
        changes_out.append(BranchChange(path, function, before, after[0], after[1], len(tests)))
    return changes_out


def _changed_lines(
    old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk], pattern: re.Pattern[str]
) -> list[tuple[list[int], list[int]]]:
    """Per hunk, the indexes of the removed and of the added lines that match pattern, less those whose text the
    hunk's other side has too (a line moved, or re-indented)."""
    out = []
    for hunk in hunks:
        removed = [i for i in range(hunk.old_lo, hunk.old_hi) if _is(old_lines[i], pattern)]
        added = [i for i in range(hunk.new_lo, hunk.new_hi) if _is(new_lines[i], pattern)]
        was = {old_lines[i].strip() for i in removed}
        now = {new_lines[i].strip() for i in added}
        out.append(
            (
                [i for i in removed if old_lines[i].strip() not in now],
                [i for i in added if new_lines[i].strip() not in was],
            )
        )
    return out


def _is(line: str, pattern: re.Pattern[str]) -> bool:
    return not _COMMENT.match(line) and pattern.search(line) is not None


def _gate_rows(path: str, old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk]) -> list[Finding]:
    first: dict[str, dict[int, str]] = {}  # gated name -> side (0 removed, 1 added) -> its first changed gate line
    lines_at: dict[str, int] = {}
    for removed, added in _changed_lines(old_lines, new_lines, hunks, _GATE):
        for side, lines, changes in ((0, old_lines, removed), (1, new_lines, added)):
            other = new_lines if side == 0 else old_lines
            for index in changes:
                name = _gated(lines, index)
                if not _defined(other, name):  # an item or function added or removed with its gate: new code
                    continue
                first.setdefault(name, {}).setdefault(side, lines[index].strip())
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


def _gated(lines: list[str], index: int) -> str:
    """What a gate line gates: the item after its attributes (`mod avx`, `fn vec_dot`), else the function it is in,
    else the module."""
    if "cfg!" not in lines[index] and "_feature_detected!" not in lines[index]:
        for following in lines[index + 1 : index + 1 + MAX_ITEM_GAP]:
            if following.strip().startswith(("#", "//", ")", "]")) or not following.strip() or _GATE.search(following):
                continue  # the gate's other attributes, or the rest of one spread over lines
            item = _ITEM.match(following)
            if item is None:
                break
            name = (item["name"] or "").rstrip(":")
            return name if item["what"] == "fn" and name else f"{item['what']} {name}".strip()
    return _function(lines, index) or "module"


def _defined(lines: list[str], name: str) -> bool:
    """Whether the item or function a gate is named by is in this version of the file too."""
    if name == "module":
        return True
    what, _, item = name.rpartition(" ")
    head = re.compile(rf"\b{what or 'fn'}\s+(?:<[^>]*>\s*)?{re.escape(item)}\b") if item else re.compile(rf"\b{what}\b")
    return any(head.search(line) for line in lines)


def _function(lines: list[str], index: int) -> str | None:
    """The fn whose body holds line index: the nearest `fn name` above it whose brace is still open there."""
    balance = 0  # braces opened less closed from the line looked at down to line index
    for i in range(index - 1, max(index - MAX_FUNCTION_LINES, 0) - 1, -1):
        text = lines[i].split("//", 1)[0]
        balance += text.count("{") - text.count("}")
        head = _FN.search(text)
        if head and balance > 0:
            return head["name"]
    return None


def _env_rows(path: str, old_lines: list[str], new_lines: list[str]) -> list[Finding]:
    return diff_env_reads(path, _env_reads(old_lines), _env_reads(new_lines), detail="environment read in Rust")


def _env_reads(lines: list[str]) -> dict[str, list[str]]:
    reads: dict[str, list[str]] = {}
    for line in lines:
        if not _COMMENT.match(line):
            for match in _ENV.finditer(line):
                reads.setdefault(match["name"], []).append(line.strip().rstrip(" ,;{}"))
    return reads


def _const_rows(path: str, old_lines: list[str], new_lines: list[str]) -> list[Finding]:
    old, new = _constants(old_lines), _constants(new_lines)
    return [
        Finding(FindingKind.NATIVE_THRESHOLD, path, name, "", old[name], new[name], detail="a Rust constant")
        for name in old
        if name in new and old[name] != new[name]
    ]


def _constants(lines: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines:
        match = _CONST.match(line)
        if match and re.search(r"\d|\"|\btrue\b|\bfalse\b", match["value"]):
            found.setdefault(match["name"], " ".join(match["value"].split()))
    return found
