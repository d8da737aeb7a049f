"""The call a host function hands its work to, moved to another callee: a hunk removes a call statement and adds
one to a callee the old file never names, passing on two or more of the same arguments (`reduce(dest, idest, in,
reduceOpMax<T>(), stream, true);` -> `cub_argmax(dest, idest, in, stream);`), while the old callee is still named in
the new file (not a rename of it everywhere). That is a dispatch-logic row of the function: the work runs in
another implementation. Logging, checking, memory and synchronisation helpers and macros are no such calls, and a
kernel's own code is its body."""

from __future__ import annotations

import re
from collections.abc import Iterable

from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_scope import enclosing_function

MIN_SHARED_ARGUMENTS = 2

_CALL_STATEMENT = re.compile(
    r"^\s*(?:return\s+|[\w:<>]+\s+\w+\s*=\s*|[\w.>\[\]-]+\s*=\s*)?"  # a call, returned or assigned
    r"(?P<callee>[A-Za-z_][\w:]*)\s*(?:<[^;()]*>\s*)?\((?P<arguments>.*)\)\s*;\s*$"
)
_NOT_WORK = re.compile(
    r"log|print|info|assert|check|error|exception|warn|abort|debug|trace|alloc|free|memcpy|memset|sync|nvtx|"
    r"profile|timer|once|"
    r"copy|fill|resize|reserve|push|emplace|insert|erase|clear|size|get|set|make|to_string|format|cast|throw",
    re.I,
)
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def callee_rows(
    path: str, old_lines: list[str], new_lines: list[str], hunks: Iterable[Hunk], texts: tuple[str, str]
) -> list[Finding]:
    """The rows of the functions whose work a hunk hands to a new callee; texts are both versions' lines joined."""
    old_text, new_text = texts
    rows: dict[str, Finding] = {}
    for hunk in hunks:
        removed = _calls(old_lines, hunk.old_lo, hunk.old_hi)
        added = _calls(new_lines, hunk.new_lo, hunk.new_hi)
        for index, callee, arguments in added:
            if _named(callee, old_text):
                continue  # a callee the old file has: another call of it, not a new implementation
            for _, was, was_arguments in removed:
                if was == callee or not _named(was, new_text) or len(arguments & was_arguments) < MIN_SHARED_ARGUMENTS:
                    continue
                scope = enclosing_function(new_lines, index)
                if scope is None or scope.device or scope.function in rows:
                    continue
                rows[scope.function] = Finding(
                    FindingKind.DISPATCH_LOGIC,
                    path,
                    scope.function,
                    key="callee",
                    before=short_text(was),
                    after=short_text(callee),
                    line=index + 1,
                    detail="the call that does the work moves to another implementation",
                )
    return list(rows.values())


def _calls(lines: list[str], lo: int, hi: int) -> list[tuple[int, str, set[str]]]:
    found = []
    for index in range(lo, min(hi, len(lines))):
        match = _CALL_STATEMENT.match(lines[index])
        if match is None:
            continue
        callee = match["callee"].split("::")[-1]
        if callee.isupper() or _NOT_WORK.search(callee):
            continue
        found.append((index, match["callee"], set(_NAME.findall(match["arguments"]))))
    return found


def _named(callee: str, text: str) -> bool:
    return re.search(rf"\b{re.escape(callee.split('::')[-1])}\b", text) is not None
