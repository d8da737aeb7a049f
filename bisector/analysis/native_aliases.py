"""Type aliases a commit introduces in C / C++ / CUDA: after `typedef uint4 vector_t;` (or `using vector_t =
uint4;`), a value that now says vector_t where it said uint4 (`sizeof(uint4) / sizeof(T)` -> `sizeof(vector_t) /
sizeof(T)`) is the same value under the alias, no change."""

from __future__ import annotations

import re

from bisector.analysis.findings import Finding

_TYPEDEF = re.compile(r"^\s*typedef\s+(?P<old>[\w:<>, ]+?)\s+(?P<new>[A-Za-z_]\w*)\s*;")
_USING = re.compile(r"^\s*using\s+(?P<new>[A-Za-z_]\w*)\s*=\s*(?P<old>[\w:<>, ]+?)\s*;")
_TOKEN = re.compile(r"[A-Za-z_][\w:]*|\S")


def without_alias_renames(findings: list[Finding], new_lines: list[str]) -> list[Finding]:
    """The rows less those whose before and after differ only by names the new version defines as aliases of the
    names they replace."""
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
        match = _TYPEDEF.match(line) or _USING.match(line)
        if match is not None:
            found[match["new"]] = " ".join(match["old"].split())
    return found


def _same_under(aliases: dict[str, str], before: str, after: str) -> bool:
    old, new = _TOKEN.findall(before), _TOKEN.findall(after)
    if len(old) != len(new) or old == new:
        return False
    return all(a == b or aliases.get(b) == a for a, b in zip(old, new, strict=True))
