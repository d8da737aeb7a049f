"""Tile and instruction shapes chosen in code: a function whose assignment to a tile or instruction-shape name
changes (`inst_m, inst_n = 64, gcd(self.warp_col_tiles, 256)` -> `... = 64, select_wgmma_inst_n(...)`, `BLOCK_N =
64` -> `BLOCK_N = 128`) decides how a kernel is tiled even where no launch of the module reads it (a code generator,
a compiler's instruction emitter). One dispatch-logic row per such function, unless another row already names it
(a launch's row shows the tiles it reads); kernels' own code (decorated functions) is left out.
"""

from __future__ import annotations

import ast
import re
from collections import Counter

from bisector.analysis.code_shape import FunctionNode, ParsedSource, module_functions, own_nodes
from bisector.analysis.findings import Finding
from bisector.analysis.function_changes import changed_functions, function_row
from bisector.analysis.launch_calls import is_tile_name

_INSTRUCTION_SHAPE = re.compile(r"^(?:inst|mma|wgmma|micro_size|warp_tile|atom)_?[mnkxy]$", re.I)


def with_tile_rows(
    path: str, before: ParsedSource | None, after: ParsedSource | None, rows: list[Finding]
) -> list[Finding]:
    """The module's rows and a dispatch-logic row for each function on both sides, named by no row, whose
    assignments to tile or instruction-shape names differ."""
    if before is None or after is None:
        return rows
    named = {row.name for row in rows} | {row.detail.removeprefix("in ").split(";")[0] for row in rows}
    defined = {name for name, _ in module_functions(before.tree.body)}
    added = []

    def skipped(name: str, node: FunctionNode) -> bool:
        return name in named or bool(node.decorator_list)

    for name, old, node in changed_functions(before, after, skipped):
        was, now = _tile_assignments(old, defined), _tile_assignments(node, defined)
        if was != now:
            gone, new = sorted((was - now).elements()), sorted((now - was).elements())
            added.append(function_row(path, name, node, gone, new, "tile or instruction shape chosen in code"))
    return rows + added


def _tile_assignments(function: FunctionNode, defined: set[str]) -> Counter[str]:
    """`name = value` texts of the function's own assignments (not of nested functions) to tile names; a value
    that calls a function of the module is that call whatever its arguments (`BLOCK_M, num_warps = _meta(d)`: the
    function's own rows show what it returns, launch_feeds.py a change of function)."""
    found: Counter[str] = Counter()
    for node in own_nodes(function):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:  # x: int = 4 is x = 4
            assigned = node.targets if isinstance(node, ast.Assign) else [node.target]
            targets = [n.id for target in assigned for n in ast.walk(target) if isinstance(n, ast.Name)]
            if any(is_tile_name(t) or _INSTRUCTION_SHAPE.match(t) for t in targets):
                found[f"{', '.join(targets)} = {_value_text(node.value, defined)}"] += 1
    return found


def _value_text(value: ast.expr, defined: set[str]) -> str:
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in defined:
        return f"{value.func.id}(...)"
    return ast.unparse(value)
