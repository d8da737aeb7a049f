"""Which changed C / C++ / CUDA constants (native.py's entries) are rows: not a value that only says a type alias
the commit defines (native_aliases.py), and not a local of a kernel's own code computed from other names
(`const int alive = cluster_idx < state.cluster_count;` in a `__device__` function: kernel body, like its
branches); a kernel's local holding a number alone (`constexpr int kBlockM = 128;`) is a tuning constant, a row. A
host function's local that configures a launch is a launch parameter of the function (native_launch_locals.py)."""

from __future__ import annotations

import re
from collections.abc import Set
from typing import Protocol

from bisector.analysis.findings import Finding
from bisector.analysis.native_aliases import without_alias_renames
from bisector.analysis.native_launch_locals import as_launch_rows
from bisector.analysis.native_scope import enclosing_function

_NUMBER_ALONE = re.compile(r"-?(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?)[uUlLfF]*|true|false")


class Scanned(Protocol):
    @property
    def lines(self) -> list[str]: ...

    @property
    def nested(self) -> Set[str]: ...


def kept_entry_rows(findings: list[Finding], before: Scanned | None, after: Scanned | None) -> list[Finding]:
    rows = without_alias_renames(findings, after.lines if after else [])
    rows = [row for row in rows if not _kernel_local(row, before, after)]
    return as_launch_rows(rows, {True: after.lines if after else [], False: before.lines if before else []})


def _kernel_local(row: Finding, before: Scanned | None, after: Scanned | None) -> bool:
    scan, value = (after, row.after) if after is not None and row.after is not None else (before, row.before)
    if scan is None or value is None or row.line is None or row.name not in scan.nested:
        return False
    if _NUMBER_ALONE.fullmatch(value.strip()):
        return False
    scope = enclosing_function(scan.lines, row.line - 1)
    return scope is not None and scope.device
