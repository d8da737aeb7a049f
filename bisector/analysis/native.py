"""C, C++ and CUDA, read as text (no compiler): constant arrays, scalar constants and #defines, and the
if / switch / #if conditions on a batch size, the arch or a dtype that a commit changes."""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_bodies import function_bodies, inside_bodies
from bisector.analysis.native_conditions import chooses_by_arch, more_condition_label, row_name
from bisector.analysis.native_definitions import definition_rows
from bisector.analysis.native_dispatch import condition_label, default_rows, diff_env_reads, env_reads
from bisector.analysis.native_entries import kept_entry_rows
from bisector.analysis.native_instances import instance_rows
from bisector.analysis.native_launch_locals import without_renumbered_locals
from bisector.analysis.native_launches import launch_shape_rows
from bisector.analysis.native_members import Members
from bisector.analysis.native_reach import (
    MAX_READER_LINES,
    data_locals,
    guards_launch,
    instantiating_case,
    reaching_values,
)
from bisector.analysis.native_renames import Renames
from bisector.analysis.values import Leaf, Node, diff_entries, sequence

# C, C++, CUDA, HIP (.hip), Metal Shading Language (.metal, C++ based) and Objective-C++ (.mm, Metal host code);
# not .m, which is Objective-C or MATLAB.
NATIVE_SUFFIXES = (
    ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".cu", ".cuh", ".hip", ".metal", ".mm", ".inl",
    ".inc",
)  # fmt: skip

# Names that hold the batch size (rows of the activation) in GEMM and attention dispatchers.
_BATCH_NAMES = (
    r"m|M|bs|BS|batch|batch_size|batchsize|num_tokens|n_tokens|num_seqs|n_seqs|tokens|num_rows|n_rows|rows|"
    r"m_size|size_m|problem_m|batch_m|num_batch|max_batch_size|\w+_bs|bs_\w+|\w*batch_size\w*"
)
_COMPARISON = (
    rf"(?:\b(?:{_BATCH_NAMES})\b\s*(?:<=|>=|==|!=|<(?!<)|>(?!>))"
    rf"|(?:<=|>=|==|!=|(?<!<)<|(?<![->])>)\s*\b(?:{_BATCH_NAMES})\b)"
)
# a comparison in an if / while / ?:, in a flag accumulated with |= or &= (success |= block_m <= m), or on a
# continuation line of a boolean expression (&& block_m <= m)
_CONDITION = re.compile(
    rf"(?:\b(?:if|while)\s*\(|\?|[|&]=|^\s*(?:and\b|or\b|&&|\|\|)).*?{_COMPARISON}|{_COMPARISON}.*\?"
)
# a branch, a condition kept in a bool (`bool is_sm90 = major == 9;`) or a check that refuses the other case
_BRANCH = re.compile(
    r"^\s*#\s*(?:if|elif|ifdef|ifndef)\b|\b(?:if|while)\s*(?:constexpr\s*)?\(|\?|"
    r"\bbool\s+[A-Za-z_]\w*\s*=[^=]|\b(?:TORCH_CHECK|AT_ASSERTM?|TORCH_INTERNAL_ASSERT)\s*\("
)
_ARCH_WORDS = re.compile(
    r"__CUDA_ARCH\w*__|__CUDA_ARCH_\w+|__gfx\w+|\bgfx\d+|\b\w*sm_?\d{2,3}\w*|\b\w*SM_?\d{2,3}\w*|compute_capability|"
    r"\b(?:major|minor)\s*[<>=!]=?\s*\d|"
    r"\bcc\s*[<>=!]=?|\barch\b|NV_PROVIDES_SM\w*|NV_IS_EXACTLY_SM\w*|__HIP_ARCH\w*|\bCUDA_VERSION\b|__CUDACC_VER_\w+|"
    r"\b[A-Z][A-Z0-9_]*_(?:ARCH|CC)\b|\bSm\d{2,3}\b"  # a project's arch macro (TCNN_MIN_GPU_ARCH), CUTLASS's Sm80
)
# numeric element types by name (is_same_v<T, Ctx> and sizeof(T) checks pick template paths of all kinds: not these)
_DTYPE_WORDS = re.compile(
    r"\b(?:half|__half|__nv_bfloat16|bfloat16(?:_t)?|__nv_fp8\w*|fp8\w*|float8\w*|fp4\w*|bf16|fp16|\w*e4m3\w*|\w*e5m2\w*)\b|"
    r"\bis_same(?:_v)?\s*<[^;]*\b(?:float|double|u?int8_t)\b"
)
_VERSION_WORDS = re.compile(r"\b[A-Z][A-Z0-9]*_VERSION(?:_[A-Z]+)?\b")  # a library's version: CUBLAS_VERSION
_CASE = re.compile(r"^\s*case\s+[^:]+:")
_BOOL_LITERAL = re.compile(r"^\s*(?:(?:static|const|constexpr|inline)\s+)*bool\s+\w+\s*=\s*(?:true|false|0|1)\s*;")
_SWITCH = re.compile(rf"\bswitch\s*\(\s*([^)]*\b(?:{_BATCH_NAMES})\b[^)]*)\)")
_ANY_SWITCH = re.compile(r"\bswitch\s*\(")
_ANY_SWITCH_ON = re.compile(r"\bswitch\s*\(\s*([^)]*)\)")
_ARRAY_HEAD = re.compile(
    r"\s*(?:template\s*<[^>]*>\s*)?"
    r"[\w:<>,*&\s]*\b(?:const|constexpr|__constant__)\b[\w:<>,*&\s]*?"
    r"\b(?P<name>[A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=\s*)?"
)
_CONST_WORD = re.compile(r"\b(?:const|constexpr|__constant__)\b")
MAX_HEAD_CHARS = 400  # a declaration before its brace initializer ("static constexpr int TILES[2][3] =")
_SCALAR_CONST = re.compile(
    r"\b(?:const|constexpr|__constant__)\b[^;=(){}\n]*?\b(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>[^;{}]+?)\s*;"
)
# a file-scope variable, not const, that holds a threshold's number (a tunable global, set by a setter at run time)
_TUNED_GLOBAL = re.compile(
    r"^[ \t]*(?:static[ \t]+)?(?:size_t|unsigned|int|long|u?int(?:32|64)_t|float|double)[ \t]+"
    r"(?P<name>\w*(?i:threshold|limit)\w*)[ \t]*=[ \t]*(?P<value>-?\d[\w.]*)[ \t]*;",
    re.M,
)
_PREPROCESSOR = re.compile(r"^[ \t]*#[^\n]*", re.M)
_RELEASE_NUMBER = re.compile(
    r"^(?!\w*(?:MIN|MAX|REQUIRED))[A-Z][A-Z0-9_]*_(?:VERSION(?:_(?:MAJOR|MINOR|PATCH))?|(?:MAJOR|MINOR|PATCH)_VERSION)$"
)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(?P<name>[A-Za-z_]\w*)(?!\()[ \t]+(?P<value>\S.*?)[ \t]*$", re.M)


def strip_comments(text: str) -> str:
    """The text with comments blanked (newlines kept, so line numbers stay), strings left alone."""
    return _COMMENT_OR_STRING.sub(_blank_comment, text)


# A string or char literal (to skip: a // inside one is no comment), a // comment, or a /* */ comment (unterminated
# ones run to the end). Literals end at their quote or at the end of the line.
_COMMENT_OR_STRING = re.compile(
    r"\"(?:\\.|[^\"\\\n])*(?:\"|(?=\n)|$)|'(?:\\.|[^'\\\n])*(?:'|(?=\n)|$)|//[^\n]*|/\*.*?(?:\*/|\Z)", re.S
)
_NOT_NEWLINE = re.compile(r"[^\n]")
_NEWLINE = re.compile(r"\n")
_NUMBER = re.compile(r"(?<![\w.])\.?\d")  # a number literal (1, 0x10, 1.5f, .5), not the 4 of float4
_LITERAL = re.compile(r"-?(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?)[uUlLfF]*|true|false")
_DELIMITER = re.compile(r"[{};]")


def _string_end(text: str, start: int) -> int:
    quote, index = text[start], start + 1
    while index < len(text) and text[index] not in (quote, "\n"):
        index += 2 if text[index] == "\\" else 1
    return min(index + 1, len(text))


def _blank_comment(match: re.Match[str]) -> str:
    text = match[0]
    if text.startswith(("//", "/*")):
        return _NOT_NEWLINE.sub(" ", text)
    return text


@dataclass(frozen=True)
class NativeScan:
    entries: dict[str, tuple[FindingKind, Node]]  # array or constant name -> value tree
    lines: list[str]  # the comment-stripped lines, for the conditions of changed hunks
    env: dict[str, list[str]]  # environment variable -> the lines that read it
    nested: frozenset[str] = frozenset()  # constants and brace-initialised objects declared in a function's body


def scan_native(text: str) -> NativeScan:
    stripped = strip_comments(text)
    starts = [0] + [match.end() for match in _NEWLINE.finditer(stripped)]
    entries: dict[str, tuple[FindingKind, Node]] = {}

    nested: set[str] = set()
    bodies: list[tuple[int, int]] | None = None

    def add(name: str, kind: FindingKind, node: Node) -> str:
        unique, count = name, 1
        while unique in entries:
            count += 1
            unique = f"{name}#{count}"
        entries[unique] = (kind, node)
        return unique

    for name, node, brace in _arrays(stripped, starts):
        unique = add(name, FindingKind.NATIVE_ARRAY, node)
        if bodies is None:
            bodies = function_bodies(stripped)
        if inside_bodies(bodies, brace):
            nested.add(unique)
    members: Members | None = None
    for match in _SCALAR_CONST.finditer(stripped):
        line = bisect.bisect_right(starts, match.start("name"))
        if bodies is None:
            bodies = function_bodies(stripped)
        local = inside_bodies(bodies, match.start("name"))
        members = members or Members(stripped)
        name = match["name"] if local else members.qualified(match["name"], match.start("name"))
        unique = add(name, FindingKind.NATIVE_THRESHOLD, _text_leaf(match["value"], line))
        if local:
            nested.add(unique)
    for match in _TUNED_GLOBAL.finditer(stripped):  # size_t visited_table_hashset_threshold = 500000;
        bodies = function_bodies(stripped) if bodies is None else bodies
        if not inside_bodies(bodies, match.start("name")):
            line = bisect.bisect_right(starts, match.start("name"))
            add(match["name"], FindingKind.NATIVE_THRESHOLD, _text_leaf(match["value"], line))
    for match in _DEFINE.finditer(stripped):
        if _RELEASE_NUMBER.match(match["name"]):
            continue  # the library's own version number: a release, no dispatch
        line = bisect.bisect_right(starts, match.start("name"))
        add(f"#define {match['name']}", FindingKind.NATIVE_THRESHOLD, _text_leaf(match["value"], line))
    lines = stripped.splitlines()
    return NativeScan(entries, lines, env_reads(lines) if "env" in stripped else {}, frozenset(nested))


def diff_native(path: str, before: NativeScan | None, after: NativeScan | None, hunks: Sequence[Hunk]) -> list[Finding]:
    """Rows for the entries and batch-size conditions that differ. Not rows: a const / constexpr added or removed
    whose value holds no number (derived from other names: a new local, a sizeof), a local never read or read
    only through its address (native_reach.data_locals: a guard object, a value handed on as data), the library's own
    version number (`#define CUDNN_FRONTEND_PATCH_VERSION 3`: a release), and a value
    that differs only by a name the commit renames in the file in spelling alone (nominal_4b_items -> nominal_4B_items,
    kNumThreads -> k_num_threads: the old spelling is gone from the file, the new one was not in it)."""
    was, now = without_renumbered_locals(
        before.entries if before else {}, _scope_of(before), after.entries if after else {}, _scope_of(after)
    )
    old = _tuned(was, now, before.nested if before else set())
    new = _tuned(now, was, after.nested if after else set())
    old, new = without_data_locals(old, before, new), without_data_locals(new, after, old)
    renamed = Renames(before, after)
    for name in set(old) & set(new):
        if renamed.same(old[name][1], new[name][1]):
            del old[name], new[name]
    findings = kept_entry_rows(diff_entries(path, old, new), before, after)
    old_lines, new_lines = (before.lines if before else []), (after.lines if after else [])
    for hunk in hunks:
        findings.extend(_batch_conditions(path, hunk, old_lines, new_lines))
    findings += instance_rows(path, old_lines, new_lines, hunks)
    findings += launch_shape_rows(path, old_lines, new_lines, hunks, {f.line for f in findings})
    findings += definition_rows(path, old_lines, new_lines, hunks, findings)
    findings.extend(diff_env_reads(path, before.env if before else {}, after.env if after else {}))
    return findings


def _scope_of(scan: NativeScan | None) -> tuple[list[str], frozenset[str]]:
    return (scan.lines, scan.nested) if scan else ([], frozenset())


def without_data_locals(
    entries: dict[str, tuple[FindingKind, Node]], scan: NativeScan | None, other: dict[str, tuple[FindingKind, Node]]
) -> dict[str, tuple[FindingKind, Node]]:
    """The entries less the changed function locals read only through their address (native_reach.data_locals)."""
    if scan is None or not scan.nested:
        return entries
    changed = [
        name
        for name, (_, node) in entries.items()
        if name in scan.nested and (name not in other or other[name][1].canonical != node.canonical)
    ]
    data = data_locals(changed, scan.lines) if changed else set()
    return {name: entry for name, entry in entries.items() if name not in data}


def _tuned(
    entries: dict[str, tuple[FindingKind, Node]],
    other: dict[str, tuple[FindingKind, Node]],
    nested: frozenset[str] | set[str],
) -> dict[str, tuple[FindingKind, Node]]:
    """The entries, less the const / constexpr scalars that are absent from the other side and hold no number, or
    are locals of a function computed from other names (`const int n_chunks = (len + kChunk - 1) / kChunk;`: its
    readers, changed too, show it); a local holding a number alone (`constexpr int kNumStages = 4;`) is a row."""
    return {
        name: (kind, node)
        for name, (kind, node) in entries.items()
        if name in other
        or kind is not FindingKind.NATIVE_THRESHOLD
        or name.startswith("#define")
        or not isinstance(node, Leaf)
        or (_NUMBER.search(node.text) and (name not in nested or _LITERAL.fullmatch(node.text) is not None))
    }


def _batch_conditions(path: str, hunk: Hunk, old_lines: list[str], new_lines: list[str]) -> list[Finding]:
    """The condition lines (batch size, arch, dtype, case, switch macro) that the hunk removes and adds, paired in
    order (a line removed and added with the same text only moved) and named by their function, then defaults."""
    removed = [(i, label) for i in range(hunk.old_lo, hunk.old_hi) if (label := _condition(old_lines, i))]
    added = [(i, label) for i in range(hunk.new_lo, hunk.new_hi) if (label := _condition(new_lines, i))]
    moved = Counter(_text(old_lines[i]) for i, _ in removed) & Counter(_text(new_lines[i]) for i, _ in added)
    removed, added = _unmoved(removed, old_lines, moved), _unmoved(added, new_lines, moved)
    findings: list[Finding] = []
    for position in range(max(len(removed), len(added))):
        old = removed[position] if position < len(removed) else None
        new = added[position] if position < len(added) else None
        name, key = row_name(old_lines, new_lines, old, new)
        if not name:
            continue  # a kernel's own branch, an empty check, a new threshold (row_name)
        findings.append(
            Finding(
                kind=FindingKind.NATIVE_THRESHOLD,
                file=path,
                name=name,
                key=key,
                before=_text(old_lines[old[0]]) if old else None,
                after=_text(new_lines[new[0]]) if new else None,
                line=(new[0] + 1) if new else (old[0] + 1) if old else None,
            )
        )
    old_hunk, new_hunk = old_lines[hunk.old_lo : hunk.old_hi], new_lines[hunk.new_lo : hunk.new_hi]
    line = hunk.new_lo + 1 if new_hunk else None
    after = new_lines[hunk.new_hi : hunk.new_hi + MAX_READER_LINES]
    return (
        findings + default_rows(path, old_hunk, new_hunk, line) + reaching_values(path, old_hunk, new_hunk, after, line)
    )


def _text(line: str) -> str:
    return " ".join(line.split())


def _unmoved(found: list[tuple[int, str]], lines: list[str], moved: Counter[str]) -> list[tuple[int, str]]:
    left = Counter(moved)
    kept = []
    for index, label in found:
        if left[_text(lines[index])] > 0:
            left[_text(lines[index])] -= 1
        else:
            kept.append((index, label))
    return kept


def _condition(lines: list[str], index: int) -> str:
    """'condition on the batch size', 'case of switch (m)', 'condition on the arch' (#if __CUDA_ARCH__ >= 900,
    if (cc >= 90)) or 'condition on the dtype' (if constexpr (is_same_v<T, half>)) when line index is one, else ''.
    A bool initialised with a literal (`bool fp16 = false;`) holds no condition."""
    if index >= len(lines) or _BOOL_LITERAL.match(lines[index]):
        return ""
    line = lines[index]
    if _CASE.match(line):
        for earlier in range(index, max(index - 200, -1), -1):
            if _ANY_SWITCH.search(lines[earlier]):
                switch = _SWITCH.search(lines[earlier]) or (
                    _ANY_SWITCH_ON.search(lines[earlier]) if instantiating_case(lines, index) else None
                )
                return f"case of switch ({' '.join(switch[1].split())})" if switch else ""
        return ""
    if _CONDITION.search(line):
        return "condition on the batch size"
    if _ARCH_WORDS.search(line) and (_BRANCH.search(line) or chooses_by_arch(lines, index)):
        return "condition on the arch"
    if _BRANCH.search(line) and _DTYPE_WORDS.search(line):
        return "condition on the dtype"
    if _BRANCH.search(line) and _VERSION_WORDS.search(line):
        return "condition on the version"
    label = condition_label(line) or ("condition choosing the kernel" if guards_launch(lines, index) else "")
    return label or more_condition_label(lines, index)


def _arrays(stripped: str, starts: list[int]) -> Iterable[tuple[str, Node, int]]:
    """Brace initializers of const / constexpr / __constant__ declarations, parsed into trees."""
    stripped = _PREPROCESSOR.sub(lambda match: " " * len(match[0]), stripped)
    last_delimiter = -1
    position = 0
    while (delimiter := _DELIMITER.search(stripped, position)) is not None:
        index = delimiter.start()
        position = index + 1
        if delimiter[0] == "{":
            head = stripped[last_delimiter + 1 : index].strip()
            match = _ARRAY_HEAD.fullmatch(head) if _could_be_array_head(head) else None
            if match is not None:
                node, end = _initializer(stripped, index, starts)
                yield match["name"], node, index
                last_delimiter = end
                position = end + 1
                continue
        last_delimiter = index


def _could_be_array_head(head: str) -> bool:
    """Cheap checks before _ARRAY_HEAD, whose nested repeats take seconds on a long run of blanked lines."""
    return len(head) <= MAX_HEAD_CHARS and "(" not in head and _CONST_WORD.search(head) is not None


def _initializer(text: str, open_brace: int, starts: list[int]) -> tuple[Node, int]:
    """Parse '{a, {b, c}, d}' from open_brace; returns the tree and the index of the closing brace."""
    items: list[Node] = []
    item_start = open_brace + 1
    index = open_brace + 1
    while index < len(text):
        char = text[index]
        if char == "{":
            child, index = _initializer(text, index, starts)
            items.append(child)
            item_start = index + 1
            while item_start < len(text) and text[item_start] in " \t\r\n":
                item_start += 1
            if item_start < len(text) and text[item_start] == ",":
                item_start += 1
            index = item_start
            continue
        if char in ",}":
            piece = text[item_start:index]
            if piece.strip():
                first_char = item_start + len(piece) - len(piece.lstrip())
                items.append(_text_leaf(piece, bisect.bisect_right(starts, first_char)))
            if char == "}":
                return sequence(items, "{}", bisect.bisect_right(starts, open_brace)), index
            item_start = index + 1
        elif char in "\"'":
            index = _string_end(text, index)
            continue
        index += 1
    return sequence(items, "{}", bisect.bisect_right(starts, open_brace)), len(text)


def _text_leaf(text: str, line: int) -> Leaf:
    normalized = " ".join(text.split())
    return Leaf(normalized, normalized, line)
