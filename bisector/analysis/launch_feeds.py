"""Functions whose launches take their inputs from another function of the module, and which one changed.

    config = get_fwd_config(B, H, M, N, D)     ->    config = get_bwd_config(B, H, M, N, D)
    BLOCK_M, BLOCK_N, num_warps = config
    _bwd_kernel[grid](q, BLOCK_M=BLOCK_M, num_warps=num_warps)

The tile sizes come from the function called: which function, and with which arguments, is the caller's
dispatch decision, though no literal of the caller changed (reach.py follows the names back from the launch).
"""

from __future__ import annotations

import ast
import re

from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.launch_calls import decorated, launch_test
from bisector.analysis.python_tables import ParsedModule
from bisector.analysis.reach import FunctionNode, LaunchGraph, callee_name, launch_flow, module_functions

_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def feed_rows(
    path: str, old: ParsedModule | None, new: ParsedModule | None, shown: frozenset[str] = frozenset()
) -> list[Finding]:
    """A dispatch-logic row for each host function, on both sides and with changed text, whose launch inputs come
    from calls of other module functions on both sides, of another function now (a feed added or dropped with
    its launch is new or dropped code; one whose arguments change is shown by the rows of what changed them). A
    function that only adds feeds, each from a function with a dispatch-logic row of its own (shown: a new chooser,
    config_choosers.py), gets none: that row and the condition that calls it say it."""
    if old is None or new is None:
        return []
    old_functions, new_functions = _definitions(old), _definitions(new)
    old_names = {name.rsplit(".", 1)[-1] for name in old_functions}
    new_names = {name.rsplit(".", 1)[-1] for name in new_functions}
    added_or_dropped = old_names ^ new_names
    changed = []  # a function whose text names other functions of the module than before (the cheap test first)
    for name, (_, node) in new_functions.items():
        if name not in old_functions:
            continue
        new_text, old_text = _text(new, node), _text(old, old_functions[name][1])
        if new_text == old_text and not any(function in new_text for function in added_or_dropped):
            continue  # the same text names the same functions of the module
        if _called(new_text, new_names) != _called(old_text, old_names):
            changed.append(name)
    if not changed:
        return []
    old_graph, new_graph = _graph(old.tree), _graph(new.tree)
    changed = [name for name in changed if name not in new_graph.kernels]  # a kernel's own calls run on the device
    rows: list[Finding] = []
    for name in changed:
        before = _feeds(old_graph, *old_functions[name])
        after = _feeds(new_graph, *new_functions[name])
        was, now = {callee for callee, _ in before}, {callee for callee, _ in after}
        if before and after and was != now and not (was <= now and now - was <= shown):
            rows.append(
                Finding(FindingKind.DISPATCH_LOGIC, path, name, before="; ".join(text for _, text in before),
                        after="; ".join(text for _, text in after), line=new_functions[name][1].lineno,
                        detail="launch inputs from module functions")
            )  # fmt: skip
    return rows


def _definitions(module: ParsedModule) -> dict[str, tuple[str, FunctionNode]]:
    return {name: (owner, node) for name, owner, node in module_functions(module.tree.body)}


def _text(module: ParsedModule, node: FunctionNode) -> str:
    return "\n".join(module.lines[node.lineno - 1 : node.end_lineno or node.lineno])


def _called(text: str, functions: set[str]) -> set[str]:
    return {word for word in _CALLED.findall(text) if word in functions}


def _graph(tree: ast.Module) -> LaunchGraph:
    return LaunchGraph(tree, launch_test(decorated(tree)))


def _feeds(graph: LaunchGraph, owner: str, function: FunctionNode) -> list[tuple[str, str]]:
    """`config = get_bwd_config(B, H)`: the assignments from calls of the module's functions to names that
    reach the function's launches."""
    inputs = launch_flow(function, graph, owner)[0]
    if not inputs:
        return []
    found: list[tuple[str, str]] = []
    for node in graph.nodes(function):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        callee = callee_name(node.value, owner)
        if callee not in graph.definitions:
            continue
        targets = {n.id for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)}
        if targets & inputs:
            found.append((callee, short_text(ast.unparse(node))))
    return sorted(found)
