"""A host function's local that sets a kernel launch's configuration (`const int block_size = 512;` read in
`<<<grid_size, block_size>>>`, or in a dim3 the launch reads: `dim3 threads = {32u, N_BLOCK_ROWS, BLOCK_DIM_Z};`, or
in any dim3 the function builds: `launch_and_time_kernel(config, kernel, dim3(gdx, gdy, gdz), ...)`, or an OpenCL
work size by its name: `std::vector<uint32_t> lws = {kwg_size / 64, 64, 0};`) is a launch parameter of that
function: its row is a launch-parameter row named by the function, as the launch's own rows are, not a constant of
its own. Locals that keep their value in their function are no change, whatever number their name gets through the
file (without_renumbered_locals)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Set
from dataclasses import replace

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.native_scope import enclosing_function, function_body
from bisector.analysis.values import Node

_Key = tuple[str, str, Hashable]  # a local's function, name and value
_LAUNCH = re.compile(r"<<<(.*?)>>>", re.S)
_NAME = re.compile(r"[A-Za-z_]\w*")
# OpenCL's and SYCL's names for a launch's shape: lws / gws, local_work_size, global_ws (mace, CLBlast, ncnn)
WORK_SIZE_NAME = r"(?:[lg]ws|(?:local|global)_?(?:work_?size|ws)s?)"
_WORK_SIZE = re.compile(WORK_SIZE_NAME, re.I)
# a grid or block shape built in place for a launch helper: `launch_and_time_kernel(cfg, kernel, dim3(gdx, gdy), ...)`
_DIM3 = re.compile(r"\bdim3\s*(?:[A-Za-z_]\w*\s*)?[({]([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*)[)}]")


def as_launch_rows(rows: list[Finding], lines_of: dict[bool, list[str]]) -> list[Finding]:
    """The rows, those of a host function's locals that configure a launch of the function renamed to it
    (lines_of: the file's lines after (True) and before (False) the commit)."""
    return [_launch_row(row, lines_of) or row for row in rows]


def _launch_row(row: Finding, lines_of: dict[bool, list[str]]) -> Finding | None:
    if row.line is None or row.kind not in (FindingKind.NATIVE_THRESHOLD, FindingKind.NATIVE_ARRAY):
        return None
    lines = lines_of[row.after is not None]
    scope = enclosing_function(lines, row.line - 1)
    if scope is None or scope.device:
        return None
    body = "\n".join(function_body(lines, scope.line))
    local = row.name.split("#")[0]
    if not _configures_launch(local, body):
        return None
    return replace(
        row,
        kind=FindingKind.LAUNCH_PARAM,
        name=scope.function,
        key=f"{local} in a launch configuration",
        detail=f"{local}: {row.detail}" if row.detail else local,
    )


def _configures_launch(local: str, body: str) -> bool:
    """The local is a work size by its name, is named in a `<<<...>>>` or dim3 of the body, or in the initialiser of
    a name that one names."""
    if _WORK_SIZE.fullmatch(local):
        return True
    shapes = [*_LAUNCH.finditer(body), *_DIM3.finditer(body)]
    configured = {name for shape in shapes for name in _NAME.findall(shape[1])}
    if local in configured:
        return True
    word = re.escape(local)
    return any(
        re.search(rf"\b{re.escape(name)}\s*(?:=|\(|\{{)[^;]*\b{word}\b", body) for name in configured if name != local
    )


def without_renumbered_locals(
    old: dict[str, tuple[FindingKind, Node]],
    old_scope: tuple[list[str], Set[str]],
    new: dict[str, tuple[FindingKind, Node]],
    new_scope: tuple[list[str], Set[str]],
) -> tuple[dict[str, tuple[FindingKind, Node]], dict[str, tuple[FindingKind, Node]]]:
    """The entries of both sides less the function locals that keep their value in their function: locals of one
    name are numbered through the file (`grid_size#3`), so a local added above others renumbers them, and their
    rows would pair locals of different functions (old_scope / new_scope: the side's lines and nested names)."""
    changed = {
        name.split("#")[0]
        for entries, other in ((old, new), (new, old))
        for name, (_, node) in entries.items()
        if name not in other or other[name][1].canonical != node.canonical
    }
    old_keys, new_keys = _local_keys(old, *old_scope, changed), _local_keys(new, *new_scope, changed)
    kept_old = Counter(old_keys.values()) - Counter(new_keys.values())
    kept_new = Counter(new_keys.values()) - Counter(old_keys.values())
    return _kept(old, old_keys, kept_old), _kept(new, new_keys, kept_new)


def _local_keys(
    entries: dict[str, tuple[FindingKind, Node]], lines: list[str], nested: Set[str], changed: Set[str]
) -> dict[str, _Key]:
    """(function, name, value) of the locals of a name some entry of which changes (changed: those names)."""
    keys = {}
    for name, (_, node) in entries.items():
        line = getattr(node, "line", None)
        if name in nested and name.split("#")[0] in changed and isinstance(line, int) and line > 0:
            scope = enclosing_function(lines, line - 1)
            keys[name] = (scope.function if scope else "", name.split("#")[0], node.canonical)
    return keys


def _kept(
    entries: dict[str, tuple[FindingKind, Node]],
    keys: dict[str, _Key],
    changed: Counter[_Key],
) -> dict[str, tuple[FindingKind, Node]]:
    left = Counter(changed)
    kept = {}
    for name, entry in entries.items():
        key = keys.get(name)
        if key is None:
            kept[name] = entry
        elif left[key] > 0:
            left[key] -= 1
            kept[name] = entry
    return kept
