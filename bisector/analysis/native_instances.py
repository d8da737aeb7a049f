"""C / C++ / CUDA instance lists: runs of one template or macro written out once per tuned case, such as a
tuple of kernel instances (`using instances = std::tuple< DeviceGemm<..., 256, 128, 64, ...>, ... >;`), a launcher
registry (`REGISTER_FWD_LAUNCHER(14336, fp16, fp32, 2, 1, 4, 16);` once per size and dtype), a dispatch macro's
cases (`GN_SELECT(12, ...) \\` once per channel count) or a host's per-size configs
(`run<gemm::config<4, 8, 12>>(N, N, N);` once per N).

An entry is a line that starts with a name followed by `<` or `(` and holds a number and no test, in a run of at
least MIN_LIST_ENTRIES entries of that name (blank lines or up to MAX_GAP_LINES other lines between two). An entry a
hunk adds, removes or changes (not one removed and added with the same text: that only moved) is a row of its list,
named by what holds the list: the tuple alias or `#define` around it (a native array), or the host function whose
body it is in (a launch when the entry passes template arguments, the kernel instance it picks; a native array when
it passes values to a registry). Not lists: the arguments of one template (`using Gemm = Default<..., Shape<64, 64>,
...>`), entries in device code (`__global__` / `__device__` functions: kernel bodies) and a case's code (its case
row shows it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.native_dispatch import ENV_PARAM
from bisector.analysis.native_scope import enclosing_function
from bisector.vocab.gitdiff import Hunk, line_text, unmoved

MIN_LIST_ENTRIES = 3
MAX_GAP_LINES = 2
MAX_OWNER_LINES = 400  # how far above an entry the alias or macro holding it is looked for

_ENTRY = re.compile(r"^\s*(?P<head>[A-Za-z_][\w:]*(?:(?:\.|->)[A-Za-z_]\w*)*)\s*(?P<open><(?!<)|\()")
_NUMBER = re.compile(r"(?<![\w.])\d")
_NOT_LISTS = frozenset({  # keywords, casts and printing or checking calls: no entry of a list
    "if", "for", "while", "switch", "return", "sizeof", "alignof", "static_assert", "static_cast", "reinterpret_cast",
    "const_cast", "dynamic_cast", "decltype", "template", "typename", "using", "typedef", "case", "else", "do", "new",
    "delete", "throw", "asm", "__asm__", "printf", "fprintf", "snprintf", "assert", "defined", "operator",
})  # fmt: skip
_CHECK = re.compile(r"(?i)^(?:\w*_)?(?:check|assert|expect|log|print|debug|trace|warn|error|fail)\w*$")
_TEST = re.compile(r"<=|>=|==|!=|&&|\|\||\?|[^<]<\s*[A-Za-z_]\w*\s*[)?]")
_CASE = re.compile(r"^\s*(?:case\b[^:]*|default\s*):")
_TYPE_LIST = re.compile(r"(?i)(?:tuple|list)\s*<")
_OWNER = re.compile(r"^\s*(?:using\s+(?P<alias>[A-Za-z_]\w*)\s*=|#\s*define\s+(?P<macro>[A-Za-z_]\w*))")


def instance_rows(path: str, old_lines: list[str], new_lines: list[str], hunks: Iterable[Hunk]) -> list[Finding]:
    """One row per list whose entries the hunks add, remove or change."""
    hunks = list(hunks)
    removed = [(i, head) for hunk in hunks for i in range(hunk.old_lo, hunk.old_hi) if (head := _head(old_lines, i))]
    added = [(i, head) for hunk in hunks for i in range(hunk.new_lo, hunk.new_hi) if (head := _head(new_lines, i))]
    if not removed and not added:
        return []
    lists: dict[tuple[FindingKind, str], list[list[str]]] = {}
    kept = unmoved(removed, added, old_lines, new_lines)
    for lines, side, entries in zip((old_lines, new_lines), (0, 1), kept, strict=True):
        for index, head in entries:
            text = line_text(lines[index])
            if _run_size(lines, index, head) < MIN_LIST_ENTRIES:
                continue
            owner = _owner(lines, index, head)
            if owner is not None:
                lists.setdefault(owner, [[], []])[side].append(text)
    return [
        Finding(
            kind=kind,
            file=path,
            name=name,
            before=short_text(old[0]) if old else None,
            after=short_text(new[0]) if new else None,
            detail=f"instance list: {len(old)} entries removed or changed, {len(new)} added or changed",
        )
        for (kind, name), (old, new) in lists.items()
    ]


def is_list_entry(lines: list[str], index: int) -> bool:
    """Whether line index is an entry of an instance list (its rows are this module's; not the arguments of one
    template)."""
    head = _head(lines, index)
    return bool(head) and _run_size(lines, index, head) >= MIN_LIST_ENTRIES and _owner(lines, index, head) is not None


def _head(lines: list[str], index: int) -> str:
    """The entry's name when line index is an entry of a list (a name, then < or (, then values with a number and
    no test: a line that compares is a condition), else ''."""
    if index >= len(lines):
        return ""
    line = lines[index]
    match = _ENTRY.match(line)
    if (
        match is None
        or ENV_PARAM.match(line)
        or not _NUMBER.search(line, match.end())
        or _TEST.search(line, match.end())
    ):
        return ""
    head = match["head"]
    last = re.split(r"::|\.|->", head)[-1]
    if last in _NOT_LISTS or _CHECK.match(last):
        return ""
    return f"{head}{match['open']}"


def _run_size(lines: list[str], index: int, head: str) -> int:
    """How many entries of this head are in the run around line index: entries of the head separated by blank lines
    or at most MAX_GAP_LINES other lines (`N = 2048;` between two per-size calls)."""
    size = 1
    for step in (-1, 1):
        gap, at = 0, index + step
        while 0 <= at < len(lines) and gap <= MAX_GAP_LINES:
            if _head(lines, at) == head:
                size, gap = size + 1, 0
            elif lines[at].strip():
                gap += 1
            at += step
    return size


def _owner(lines: list[str], index: int, head: str) -> tuple[FindingKind, str] | None:
    """The list's kind and name: the tuple alias or macro it is in, the host function whose body it is in, or its
    own name at file scope. None for the arguments of one template (`using Gemm = Default<..., Shape<64, 64>,
    ...>`), in device code, and for a case's code (its case row shows it)."""
    in_statement = in_macro = True  # no statement ended / every line up to here continues a macro
    for earlier in range(index - 1, max(index - MAX_OWNER_LINES, -1), -1):
        line = lines[earlier].rstrip()
        if earlier == index - 1 and _CASE.match(line):
            return None
        in_statement = in_statement and not line.endswith((";", "{", "}"))
        in_macro = in_macro and line.endswith("\\")
        if not (in_statement or in_macro):
            break
        owner = _OWNER.match(line)
        if owner is not None and owner["alias"] and in_statement:
            return (FindingKind.NATIVE_ARRAY, owner["alias"]) if _TYPE_LIST.search(line) else None
        if owner is not None and owner["macro"] and in_macro:
            return FindingKind.NATIVE_ARRAY, owner["macro"]
    scope = enclosing_function(lines, index)
    if scope is None:
        return FindingKind.NATIVE_ARRAY, head[:-1]
    if scope.device:
        return None
    return (FindingKind.LAUNCH_PARAM if head.endswith("<") else FindingKind.NATIVE_ARRAY), scope.function
