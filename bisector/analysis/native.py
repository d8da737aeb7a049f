"""C, C++ and CUDA, read as text (no compiler): constant arrays, scalar constants and #defines, and the if / switch
/ #if conditions on a batch size, the arch or a dtype that a commit changes (native_condition_lines.py)."""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.native_condition_lines import condition_rows
from bisector.analysis.native_directives import DEFINE
from bisector.analysis.native_dispatch import diff_env_reads, env_reads, has_env_reads
from bisector.analysis.native_instances import instance_rows
from bisector.analysis.native_launch_locals import as_launch_rows, without_renumbered_locals
from bisector.analysis.native_launches import launch_shape_rows
from bisector.analysis.native_members import Members
from bisector.analysis.native_reach import data_locals
from bisector.analysis.native_renames import Renames
from bisector.analysis.native_scope import TEMPLATE_PARAMETERS, enclosing_function
from bisector.analysis.native_template_args import template_argument_rows
from bisector.analysis.native_value_forms import value_form
from bisector.analysis.rules import produce, stamped
from bisector.analysis.source_text import Language, blanked, c_literal_end
from bisector.analysis.values import Leaf, Node, diff_entries, sequence
from bisector.vocab.gitdiff import Hunk

# C, C++, CUDA, HIP (.hip), OpenCL C (.cl, .opencl), Metal Shading Language (.metal, C++ based) and Objective-C++
# (.mm, Metal host code); not .m, which is Objective-C or MATLAB.
NATIVE_SUFFIXES = (
    ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".cu", ".cuh", ".hip", ".metal", ".mm", ".inl",
    ".inc", ".cl", ".opencl",
)  # fmt: skip

# a benchmark program (`softmax_benchmark.cpp`, `bench_gemm.cu`, `benchmarks/...`): it times kernels, it chooses none
_ARRAY_HEAD = re.compile(
    r"\s*(?:template\s*<[^>]*>\s*)?"
    r"[\w:<>,*&\s]*\b(?:const|constexpr|__constant__)\b[\w:<>,*&\s]*?"
    r"\b(?P<name>[A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*"
    r"(?:=\s*(?P<type>[A-Za-z_][\w:]*\s*(?:<[\w:<>,*&\s]*>\s*)?)?)?"  # `= std::vector<Entry>{...}`: a typed list
)
_SCALAR_BRACES = re.compile(r"\{[^{},]*\}")  # one value in braces
_CONST_WORD = re.compile(r"\b(?:const|constexpr|__constant__)\b")
MAX_HEAD_CHARS = 400  # a declaration before its brace initializer ("static constexpr int TILES[2][3] =")
_SCALAR_CONST = re.compile(
    r"\b(?:const|constexpr|__constant__)\b[^;=(){}\n]*?\b(?P<name>[A-Za-z_]\w*)\s*=\s*"
    r"(?:(?P<value>[^;{}]+?)|[A-Za-z_][\w:]*\s*\{\s*(?P<braced>[^;{}]*?)\s*\})\s*;"  # `= size_t{32};`: 32
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
_NEWLINE = re.compile(r"\n")
_THREAD_INDEX = re.compile(
    r"\b(?:threadIdx|blockIdx|blockDim|gridDim)\b|\bget_(?:global|local|group)_id\s*\(|\b__builtin_amdgcn_work\w+_id_"
)
_NUMBER = re.compile(r"(?<![\w.])\.?\d")  # a number literal (1, 0x10, 1.5f, .5), not the 4 of float4
_LITERAL = re.compile(r"-?(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?)[uUlLfF]*|true|false")
_DELIMITER = re.compile(r"[{};]")
_AGGREGATE = re.compile(r"\b(?:struct|class|namespace|union|enum)\b")


@dataclass(frozen=True)
class NativeScan:
    entries: dict[str, tuple[FindingKind, Node]]  # array or constant name -> value tree
    lines: list[str]  # the comment-stripped lines, for the conditions of changed hunks
    env: dict[str, list[str]]  # environment variable -> the lines that read it
    nested: frozenset[str] = frozenset()  # constants and brace-initialised objects declared in a function's body


def scan_native(text: str) -> NativeScan:
    stripped = blanked(text, Language.C, strings=False)
    code = _PREPROCESSOR.sub(lambda match: " " * len(match[0]), stripped)
    starts = [0] + [match.end() for match in _NEWLINE.finditer(stripped)]
    entries: dict[str, tuple[FindingKind, Node]] = {}
    nested: set[str] = set()
    bodies: list[tuple[int, int]] | None = None
    members: Members | None = None

    def in_function(position: int) -> bool:
        nonlocal bodies
        bodies = _function_bodies(code) if bodies is None else bodies
        at = bisect.bisect_right(bodies, (position, position)) - 1
        return at >= 0 and bodies[at][0] <= position <= bodies[at][1]

    def add(name: str, kind: FindingKind, node: Node, local: bool = False) -> None:
        unique, count = name, 1
        while unique in entries:
            count += 1
            unique = f"{name}#{count}"
        entries[unique] = (kind, node)
        if local:
            nested.add(unique)

    def leaf(value: str, position: int) -> Leaf:
        return _text_leaf(value, bisect.bisect_right(starts, position))

    for name, node, brace in _arrays(code, starts):
        add(name, FindingKind.NATIVE_ARRAY, node, in_function(brace))
    for match in _SCALAR_CONST.finditer(stripped):
        at = match.start("name")
        local = in_function(at)
        members = members or Members(stripped)
        name = match["name"] if local else members.qualified(match["name"], at)
        add(name, FindingKind.NATIVE_THRESHOLD, leaf(match["value"] or match["braced"] or "", at), local)
    for match in _TUNED_GLOBAL.finditer(stripped):  # size_t visited_table_hashset_threshold = 500000;
        if not in_function(match.start("name")):
            add(match["name"], FindingKind.NATIVE_THRESHOLD, leaf(match["value"], match.start("name")))
    for match in DEFINE.finditer(stripped):
        if not _RELEASE_NUMBER.match(match["name"]):  # the library's own version number: a release, no dispatch
            add(f"{_MACRO}{match['name']}", FindingKind.NATIVE_THRESHOLD, leaf(match["value"], match.start("name")))
    lines = stripped.splitlines()
    env = env_reads(lines) if has_env_reads(stripped) else {}
    return NativeScan(entries, lines, env, frozenset(nested))


def diff_native(path: str, before: NativeScan | None, after: NativeScan | None, hunks: Sequence[Hunk]) -> list[Finding]:
    """Rows for the entries and batch-size conditions that differ. Not rows: a const / constexpr added or removed
    whose value holds no number (derived from other names: a new local, a sizeof), a local never read or read
    only through its address (native_reach.data_locals: a guard object, a value handed on as data), the library's own
    version number (`#define CUDNN_FRONTEND_PATCH_VERSION 3`: a release), and a value
    that differs only by a name the commit renames in the file in spelling alone (nominal_4b_items -> nominal_4B_items,
    kNumThreads -> k_num_threads: the old spelling is gone from the file, the new one was not in it), and a value
    rewritten without a change of value (native_value_forms.py: a cast added, parentheses, a
    constant local named for a part: `(m * n * k < limit)` -> `(mnk < static_cast<size_t>(limit))`). A condition line
    one hunk removes and another adds again in the same function is no row (moved)."""
    was, now = without_renumbered_locals(
        before.entries if before else {}, _scope_of(before), after.entries if after else {}, _scope_of(after)
    )
    old = _tuned(was, now, before.nested if before else set())
    new = _tuned(now, was, after.nested if after else set())
    old, new = without_data_locals(old, before, new), without_data_locals(new, after, old)
    renamed = Renames(before, after)
    old_values, new_values = _values(before), _values(after)
    for name in set(old) & set(new):
        if renamed.same(old[name][1], new[name][1]) or _thread_indices(old[name][1], new[name][1]):
            del old[name], new[name]
    tables = _kept_entry_rows(diff_entries(path, old, new), before, after)
    findings = stamped("native_tables", [_macro_named(row) for row in tables])
    old_lines, new_lines = (before.lines if before else []), (after.lines if after else [])
    findings += produce("native_conditions", _condition_rows, path, hunks, old_lines, new_lines)
    findings += produce("native_instances", instance_rows, path, old_lines, new_lines, hunks)
    lines = {f.line for f in findings}
    findings += produce("native_launches", launch_shape_rows, path, old_lines, new_lines, hunks, lines)
    named = {row.name for row in findings}
    for row in produce("native_template_args", template_argument_rows, path, old_lines, new_lines, hunks):
        if row.name not in named:  # numbers passed as template arguments, for the names no other row gives
            named.add(row.name)
            findings.append(row)
    findings += produce(
        "native_env_reads", diff_env_reads, path, before.env if before else {}, after.env if after else {}
    )
    return [row for row in findings if not _rewritten(row, old_values, new_values)]


def _condition_rows(path: str, hunks: Sequence[Hunk], old_lines: list[str], new_lines: list[str]) -> list[Finding]:
    return _unmoved(row for hunk in hunks for row in condition_rows(path, hunk, old_lines, new_lines))


def _unmoved(rows: Iterable[Finding]) -> list[Finding]:
    """The condition rows less the pairs of a line one hunk removes and another adds again in the same function and
    with the same text (`#if defined(__gfx90a__)` moved from a loop's tail into its body: the same test), and less an
    `#else`'s row where its `#if` has the same row (added or changed with it: one choice)."""
    kept = list(rows)
    named = Counter((row.kind, row.name, row.key) for row in kept)
    kept = [row for row in kept if "#else" not in (row.before, row.after) or named[(row.kind, row.name, row.key)] == 1]
    for removed in [row for row in kept if row.after is None and row.before is not None]:
        again = next((row for row in kept if row.before is None and row.after == removed.before
                      and (row.name, row.key) == (removed.name, removed.key)), None)  # fmt: skip
        if again is not None:
            kept.remove(again)
            kept.remove(removed)
    return kept


def _kept_entry_rows(rows: list[Finding], before: NativeScan | None, after: NativeScan | None) -> list[Finding]:
    """The changed constants' rows, less a value that only says a type alias the commit defines (without_alias_renames)
    and a local of a kernel's own code computed from other names (`const int alive = cluster_idx <
    state.cluster_count;` in a `__device__` function: kernel body, like its branches; a kernel's local holding a number
    alone, `constexpr int kBlockM = 128;`, is a tuning constant, a row). A host function's local that configures a
    launch is a launch parameter of the function (native_launch_locals.py)."""
    rows = without_alias_renames(rows, after.lines if after else [])
    rows = [row for row in rows if not _kernel_local(row, before, after)]
    return as_launch_rows(rows, {True: after.lines if after else [], False: before.lines if before else []})


def _kernel_local(row: Finding, before: NativeScan | None, after: NativeScan | None) -> bool:
    scan, value = (after, row.after) if after is not None and row.after is not None else (before, row.before)
    if scan is None or value is None or row.line is None or row.name not in scan.nested:
        return False
    if _LITERAL.fullmatch(value.strip()):
        return False
    scope = enclosing_function(scan.lines, row.line - 1)
    return scope is not None and scope.device


def _values(scan: NativeScan | None) -> dict[str, str]:
    """The names a row's texts may be rewritten with, each with the expression it holds: the constant locals of the
    file's functions and its macros, those it declares once. A macro defined twice (`#ifdef X` / `#define WIDTH 64`
    / `#else` / `#define WIDTH 32`) has no one value, as in native_value_forms.macro_values."""
    if scan is None:
        return {}
    once = {
        name: node.text
        for name, (_, node) in scan.entries.items()
        if "#" not in name.removeprefix(_MACRO) and f"{name}#2" not in scan.entries and isinstance(node, Leaf)
    }
    local = {name: text for name, text in once.items() if name in scan.nested}
    macros = {name.removeprefix(_MACRO): text for name, text in once.items() if name.startswith(_MACRO)}
    return {**macros, **local}


def _rewritten(row: Finding, was: dict[str, str], now: dict[str, str]) -> bool:
    """A row whose texts differ only as native_value_forms' rewrites do, or by a name written for its value
    (`int width = 32` -> `int width = WARP_SIZE` with `#define WARP_SIZE 32`)."""
    if row.before is None or row.after is None or row.before == row.after:
        return False
    return value_form(row.before, was) == value_form(row.after, now)


def _thread_indices(old: Node, new: Node) -> bool:
    """A kernel's index on both sides (`const index_t g_idx = readfirstlane(blockIdx.y / num_blocks_per_batch);`):
    which part of the work a thread or block takes, the kernel's body, not a value that tunes it."""
    return isinstance(old, Leaf) and isinstance(new, Leaf) and all(_THREAD_INDEX.search(v.text) for v in (old, new))


def _macro_named(row: Finding) -> Finding:
    """A macro's row named by the macro, as its readers write it (`GGML_SCHED_MAX_COPIES`), keyed 'macro'."""
    if not row.name.startswith(_MACRO):
        return row
    return replace(row, name=row.name.removeprefix(_MACRO), key=row.key or "macro")


_MACRO = "#define "  # how scan_native keys a macro among its entries


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


def _arrays(code: str, starts: list[int]) -> Iterable[tuple[str, Node, int]]:
    """Brace initializers of const / constexpr / __constant__ declarations (code: preprocessor lines blanked), parsed
    into trees."""
    last_delimiter = -1
    position = 0
    while (delimiter := _DELIMITER.search(code, position)) is not None:
        index = delimiter.start()
        position = index + 1
        if delimiter[0] == "{":
            head = code[last_delimiter + 1 : index].strip()
            match = _ARRAY_HEAD.fullmatch(head) if _could_be_array_head(head) else None
            if match is not None:
                node, end = _initializer(code, index, starts)
                if not match["type"] or _SCALAR_BRACES.fullmatch(code, index, end + 1) is None:
                    yield match["name"], node, index  # not `= size_t{32}`: a scalar (_SCALAR_CONST)
                last_delimiter = end
                position = end + 1
                continue
        last_delimiter = index


def _function_bodies(code: str) -> list[tuple[int, int]]:
    """(start, end) of the outermost function bodies (code: preprocessor lines blanked): a brace after a `)` that opens
    no struct, class or namespace."""
    bodies: list[tuple[int, int]] = []
    stack: list[bool] = []  # per open brace: inside a function body
    last_delimiter, opened = -1, 0
    for delimiter in _DELIMITER.finditer(code):
        index = delimiter.start()
        if delimiter[0] == "{":
            head = code[last_delimiter + 1 : index]
            inside = bool(stack and stack[-1])
            if not inside and ")" in head and not _AGGREGATE.search(TEMPLATE_PARAMETERS.sub(" ", head)):
                opened = index
                inside = True
            stack.append(inside)
        elif delimiter[0] == "}" and stack and stack.pop() and not (stack and stack[-1]):
            bodies.append((opened, index))  # the outermost function body closes
        last_delimiter = index
    return bodies


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
            index = c_literal_end(text, index)
            continue
        index += 1
    return sequence(items, "{}", bisect.bisect_right(starts, open_brace)), len(text)


def _text_leaf(text: str, line: int) -> Leaf:
    normalized = " ".join(text.split())
    return Leaf(normalized, normalized, line)


_TYPEDEF = re.compile(r"^\s*typedef\s+(?P<old>[\w:<>, ]+?)\s+(?P<new>[A-Za-z_]\w*)\s*;")
_ALIAS_USING = re.compile(r"^\s*using\s+(?P<new>[A-Za-z_]\w*)\s*=\s*(?P<old>[\w:<>, ]+?)\s*;")
_ALIAS_TOKEN = re.compile(r"[A-Za-z_][\w:]*|\S")


def without_alias_renames(findings: list[Finding], new_lines: list[str]) -> list[Finding]:
    """The rows less those whose before and after differ only by names the new version defines as aliases of the
    names they replace: after `typedef uint4 vector_t;` (or `using vector_t = uint4;`), a value that now says vector_t
    where it said uint4 (`sizeof(uint4) / sizeof(T)` -> `sizeof(vector_t) / sizeof(T)`) is the same value."""
    aliases = _aliases(new_lines) if any(f.before and f.after for f in findings) else {}
    if not aliases:
        return findings
    return [f for f in findings if not (f.before and f.after and _same_under(aliases, f.before, f.after))]


def _aliases(lines: list[str]) -> dict[str, str]:
    """Alias -> the type it names, from the typedef and using lines."""
    found: dict[str, str] = {}
    for line in lines:
        if "typedef" not in line and "using" not in line:
            continue
        match = _TYPEDEF.match(line) or _ALIAS_USING.match(line)
        if match is not None:
            found[match["new"]] = " ".join(match["old"].split())
    return found


def _same_under(aliases: dict[str, str], before: str, after: str) -> bool:
    old, new = _ALIAS_TOKEN.findall(before), _ALIAS_TOKEN.findall(after)
    if len(old) != len(new) or old == new:
        return False
    return all(a == b or aliases.get(b) == a for a, b in zip(old, new, strict=True))
