"""What a C++ class's members set for the code that reads them, outside any function body:

- a marker trait (`using matx_no_cub_reduce = bool;`, `using is_transparent = void;`, `typedef std::true_type
  use_tma;`): a member type that says only that the class has it, which templates detect to pick a path. A commit
  that adds or drops one in a class both versions define is a dispatch-logic row named by the class. Type aliases
  proper (`using value_type = bool;`: a name ending in `type` or `_t`) are no markers.
- a member's default that is a count, size or flag (`size_t workspaceSize = 1 << 25UL;`, `int num_stages{3};`; not
  const: those are native.py's constants; not a float: a scale or offset fed to the kernels is data): a commit that
  changes it is a threshold row `Class::member`; one added or dropped is new or dropped code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_scope import CLASS_HEAD, enclosing_function, enclosing_heads

_MARKER = re.compile(
    r"^\s*(?:using\s+(?P<alias>\w+)\s*=\s*(?P<type>(?:std::)?(?:void|bool|int|true_type|false_type))\s*;|"
    r"typedef\s+(?P<typedef_type>(?:std::)?(?:void|bool|int|true_type|false_type))\s+(?P<typedef>\w+)\s*;)\s*$"
)
_TYPE_ALIAS_NAME = re.compile(r"(?i)(?:type|_t)$")
_DEFAULT = re.compile(
    r"^\s*(?:mutable\s+)?(?:unsigned\s+|signed\s+)?"
    r"(?:int|long(?:\s+long)?|short|size_t|u?int\d+_t|bool|index_t|std::size_t|std::u?int\d+_t)\s+"
    r"(?P<name>[A-Za-z_]\w*)\s*(?:=\s*(?P<value>[^;{}]+?)|\{(?P<braced>[^;{}]+)\})\s*;\s*$"
)
_NUMBER = re.compile(r"(?<![\w.])\d|\btrue\b|\bfalse\b")


def class_member_rows(path: str, old_lines: list[str], new_lines: list[str], hunks: Iterable[Hunk]) -> list[Finding]:
    hunks = list(hunks)
    old = _members(old_lines, [(h.old_lo, h.old_hi) for h in hunks])
    new = _members(new_lines, [(h.new_lo, h.new_hi) for h in hunks])
    rows: list[Finding] = []
    for (kind, owner, member), (line, _) in {**old, **new}.items():
        was, now = old.get((kind, owner, member)), new.get((kind, owner, member))
        if kind == "marker" and (was is None) != (now is None) and _has_class(owner, old_lines, new_lines):
            finding_kind, name, key = FindingKind.DISPATCH_LOGIC, owner, f"marker trait {member}"
        elif kind == "default" and was and now and was[1] != now[1]:
            finding_kind, name, key = FindingKind.NATIVE_THRESHOLD, f"{owner}::{member}", "member default"
        else:
            continue
        rows.append(
            Finding(
                finding_kind,
                path,
                name,
                key=key,
                before=short_text(was[1]) if was else None,
                after=short_text(now[1]) if now else None,
                line=line + 1,
                detail="a member type that templates detect to pick a path"
                if kind == "marker"
                else "a class member's default value",
            )
        )
    return rows


def _members(lines: list[str], ranges: list[tuple[int, int]]) -> dict[tuple[str, str, str], tuple[int, str]]:
    """(kind, class, member) -> (line, text) of the marker traits and number defaults on the lines of the ranges."""
    found: dict[tuple[str, str, str], tuple[int, str]] = {}
    for lo, hi in ranges:
        for index in range(lo, min(hi, len(lines))):
            line = lines[index]
            marker = _MARKER.match(line)
            default = None if marker else _DEFAULT.match(line)
            if marker is not None:
                name = marker["alias"] or marker["typedef"]
                if _TYPE_ALIAS_NAME.search(name):
                    continue
                key, value = ("marker", name), line.strip()
            elif default is not None and _NUMBER.search(value := (default["value"] or default["braced"] or "")):
                key = ("default", default["name"])
            else:
                continue
            owner = _class_of(lines, index)
            if owner is not None:
                found[(key[0], owner, key[1])] = (index, " ".join(value.split()))
    return found


def _class_of(lines: list[str], index: int) -> str | None:
    """The class whose body holds line index directly (not in a function body), or None."""
    if enclosing_function(lines, index) is not None:
        return None
    for head in enclosing_heads(lines, index):
        found = CLASS_HEAD.search(head)
        return found[1] if found is not None else None
    return None


def _has_class(name: str, old_lines: list[str], new_lines: list[str]) -> bool:
    pattern = re.compile(rf"\b(?:struct|class)\s+{re.escape(name)}\b")
    return any(pattern.search(line) for line in old_lines) and any(pattern.search(line) for line in new_lines)
