"""Backend toggles passed to calls: a keyword argument that switches between kernel implementations by its name
(`use_triton=`, `disable_exllama=`, `use_tritonv2=`, `enable_fused_moe=`, `backend=`) that a function passes
differently after the commit (added, dropped, another value) changes which implementation its callee picks:

    QuantLinear = import_quant_linear(use_triton=use_triton, bits=bits)
 -> QuantLinear = import_quant_linear(use_triton=use_triton, bits=bits, disable_exllama=disable_exllama)

One dispatch-logic row named by the function (methods as `Class.method`), unless a dispatch-logic row names it. A
toggle forwarded as before is no change; a kernel's own code (a jit-decorated function) is left out.
"""

from __future__ import annotations

import ast
import re
from collections import Counter

from bisector.analysis.changed_statements import changed_functions, function_row
from bisector.analysis.code_shape import FunctionNode, ParsedSource, own_nodes, source_lines
from bisector.analysis.conditions import BACKEND_FLAG
from bisector.analysis.findings import Finding, FindingKind

_TOGGLE = re.compile(rf"^(?:{BACKEND_FLAG}|backend|attn_backend|attn_implementation|implementation|impl|kernel_type)$")
_KEYWORD_TEXT = re.compile(
    rf"\b(?:{BACKEND_FLAG}|backend|attn_backend|attn_implementation|implementation|impl|kernel_type)\s*="
)
_KERNEL_DECORATOR = re.compile(r"jit|triton|kernel|autotune|heuristics")


def with_toggle_rows(
    path: str, before: ParsedSource | None, after: ParsedSource | None, rows: list[Finding]
) -> list[Finding]:
    """The module's rows and a dispatch-logic row for each function on both sides whose calls pass backend toggles
    differently."""
    if before is None or after is None:
        return rows
    named = {row.name for row in rows if row.kind is FindingKind.DISPATCH_LOGIC}
    added: list[Finding] = []
    for name, old, node in changed_functions(before, after, lambda name, node: name in named or _kernel(node)):
        if not _KEYWORD_TEXT.search("\n".join(source_lines(before, old) + source_lines(after, node))):
            continue  # the cheap test first: no toggle keyword in either text
        was, now = _toggles(old), _toggles(node)
        if was != now:
            gone, new = sorted((was - now).elements()), sorted((now - was).elements())
            detail = "passes keyword arguments that pick a kernel implementation differently"
            added.append(function_row(path, name, node, gone, new, detail, key="backend toggles passed"))
    return rows + added


def _kernel(function: FunctionNode) -> bool:
    return any(_KERNEL_DECORATOR.search(ast.unparse(decorator)) for decorator in function.decorator_list)


def _toggles(function: FunctionNode) -> Counter[str]:
    """`callee(toggle=value)` for each toggle keyword of each call in the function's own code."""
    found: Counter[str] = Counter()
    for node in own_nodes(function):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg is not None and _TOGGLE.match(keyword.arg):
                found[f"{ast.unparse(node.func)}({keyword.arg}={ast.unparse(keyword.value)})"] += 1
    return found
