"""Numbers a function chooses as literals: what it returns, and what it assigns under a dispatch condition.

    def get_min_capability(self): return 75 -> 80      a capability bar a caller checks the GPU against
    def get_align_size(config): ... return 16 -> 0       an alignment the caller's kernel choice reads
    return ChipInfo(num_mxus=2, num_accumulators=128 -> 256)   a record of a device's numbers a caller sizes by
    def shared_memory_size(): <device query> -> return 64 * 1024
    if num_kv == 512: return 0 -> return 4            a seed or heuristic picked per shape
    elif sm_cnt >= 108: worker = 96 -> 108            a launch size picked per arch, under a condition that stays

A function both versions have whose returned numbers (numbers, arithmetic on numbers, tuples of numbers), or
whose numbers assigned under an arch, dtype, shape, env, backend, version or settings condition, differ hands its
callers another decision: one dispatch-logic row per such function, unless another row names it already (a
changed condition's row shows the function). Left out: kernels (a jit, autotune or heuristics decorator), dunder
methods (`__len__`) and `main` (an exit status).
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator

from bisector.analysis.changed_statements import changed_functions, function_row
from bisector.analysis.code_shape import FunctionNode, ParsedSource, decorated_as_kernel, statement_blocks
from bisector.analysis.conditions import condition_category
from bisector.analysis.findings import Finding, short_text

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_Case = tuple[ast.expr, bool]  # an if's test, and whether its else holds the statement


def with_literal_rows(
    path: str, before: ParsedSource | None, after: ParsedSource | None, rows: list[Finding]
) -> list[Finding]:
    """The module's rows and a dispatch-logic row for each function on both sides, named by no row, whose chosen
    literals (see the module's docstring) differ."""
    if before is None or after is None:
        return rows
    named = {row.name for row in rows} | {row.detail.removeprefix("in ").split(";")[0] for row in rows}

    def skipped(name: str, node: FunctionNode) -> bool:
        short = name.rsplit(".", 1)[-1]
        return name in named or short == "main" or short.startswith("__") or decorated_as_kernel(node)

    added = []
    for name, old, node in changed_functions(before, after, skipped):
        was, now = Counter(_chosen(old.body, (), {})), Counter(_chosen(node.body, (), {}))
        if was != now:
            gone, new = sorted((was - now).elements()), sorted((now - was).elements())
            added.append(function_row(path, name, node, gone, new, "numbers it returns or picks per condition"))
    return rows + added


def _chosen(statements: list[ast.stmt], conditions: tuple[_Case, ...], dispatch: dict[int, bool]) -> Iterator[str]:
    """`return 4 when num_kv == 512`, `worker = 108 when sm_cnt >= 108`: the function's own returns of numbers,
    and its assignments of numbers under a dispatch condition (the innermost condition names the case). dispatch:
    whether each if's test read so far has a category, by the test's id (the function's tree holds them all)."""
    for statement in statements:
        if isinstance(statement, _NESTED):
            continue
        if isinstance(statement, ast.Return) and statement.value is not None:
            yield from (f"return {text}{_when(conditions)}" for text in _returned_numbers(statement.value))
        if (
            isinstance(statement, ast.Assign | ast.AnnAssign)
            and statement.value is not None
            and _numbers(statement.value)
            and _under_dispatch(conditions, dispatch)
        ):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            yield f"{', '.join(map(ast.unparse, targets))} = {ast.unparse(statement.value)}{_when(conditions)}"
        if isinstance(statement, ast.If):
            yield from _chosen(statement.body, (*conditions, (statement.test, False)), dispatch)
            yield from _chosen(statement.orelse, (*conditions, (statement.test, True)), dispatch)
            continue
        if isinstance(statement, ast.Match):  # each case names what the subject picks, as an if's branches do
            for case in statement.cases:
                yield from _chosen(case.body, (*conditions, (statement.subject, False)), dispatch)
        for block in statement_blocks(statement):
            yield from _chosen(block, conditions, dispatch)


def _when(conditions: tuple[_Case, ...]) -> str:
    if not conditions:
        return ""
    test, negated = conditions[-1]
    return f" when {'not ' if negated else ''}{short_text(ast.unparse(test))}"


def _under_dispatch(conditions: tuple[_Case, ...], dispatch: dict[int, bool]) -> bool:
    """Some condition of the chain is about the arch, a dtype, a shape, ... (each judged once)."""
    for condition, _ in conditions:
        if id(condition) not in dispatch:
            dispatch[id(condition)] = bool(condition_category(condition))
        if dispatch[id(condition)]:
            return True
    return False


def _returned_numbers(value: ast.expr) -> list[str]:
    """What a return hands back as numbers: the value itself, or the numbers of a record it builds by keyword
    (`return ChipInfo(num_cores=2, vmem_bytes=64 * 1024)`: a class, named in CamelCase)."""
    if _numbers(value):
        return [ast.unparse(value)]
    if not isinstance(value, ast.Call):
        return []
    called = ast.unparse(value.func)
    if not called.rsplit(".", 1)[-1][:1].isupper():
        return []
    return [f"{called}({k.arg}={ast.unparse(k.value)})" for k in value.keywords if _numbers(k.value)]


def _numbers(value: ast.expr) -> bool:
    """A number, arithmetic on numbers (`64 * 1024`, `-1`), or a tuple or list of those."""
    if isinstance(value, ast.Tuple | ast.List):
        return bool(value.elts) and all(map(_numbers, value.elts))
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub | ast.UAdd):
        return _numbers(value.operand)
    if isinstance(value, ast.BinOp):
        return _numbers(value.left) and _numbers(value.right)
    return isinstance(value, ast.Constant) and type(value.value) in (int, float)
