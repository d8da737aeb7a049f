"""The tables a tuning function builds in its own body: `configs = []` then `configs.append(triton.Config(...))`."""

from __future__ import annotations

import ast


def local_tables(body: list[ast.stmt]) -> list[ast.stmt]:
    """The table assignments and ifs of a tuning function's body, with `xs.append(e)`, `xs.extend([...])` and
    `xs += [...]` after `xs = [...]` folded into that list (new nodes: the module's tree is not changed). A list
    still empty after that (`pruned = []`, filled in a loop) holds no tuned value."""
    out: list[ast.stmt] = []
    lists: dict[str, ast.Assign] = {}
    for statement in body:
        if isinstance(statement, ast.If):
            out.append(ast.If(statement.test, local_tables(statement.body), local_tables(statement.orelse)))
            ast.copy_location(out[-1], statement)
        elif isinstance(statement, ast.Assign | ast.AnnAssign):  # tables only: a local flag is no tuning value
            target = statement.targets[0] if isinstance(statement, ast.Assign) else statement.target
            if isinstance(target, ast.Name) and isinstance(statement.value, ast.List):
                folded = ast.Assign([target], ast.List(list(statement.value.elts), ast.Load()))
                lists[target.id] = ast.copy_location(folded, statement)
                ast.copy_location(folded.value, statement.value)
                out.append(folded)
            elif isinstance(statement.value, ast.Dict | ast.Tuple | ast.Set):
                out.append(statement)
        else:
            name, added = _added_to_list(statement)
            if name in lists:
                value = lists[name].value
                assert isinstance(value, ast.List)
                value.elts.extend(added)
    return [statement for statement in out if not _empty_list(statement)]


def _empty_list(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Assign) and isinstance(statement.value, ast.List) and not statement.value.elts


def _added_to_list(statement: ast.stmt) -> tuple[str | None, list[ast.expr]]:
    """`xs.append(e)` -> ("xs", [e]); `xs.extend([a, b])` and `xs += [a, b]` -> ("xs", [a, b])."""
    if (
        isinstance(statement, ast.AugAssign)
        and isinstance(statement.target, ast.Name)
        and isinstance(statement.op, ast.Add)
        and isinstance(statement.value, ast.List | ast.Tuple)
    ):
        return statement.target.id, list(statement.value.elts)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and len(call.args) == 1:
            if call.func.attr == "append":
                return call.func.value.id, [call.args[0]]
            if call.func.attr == "extend" and isinstance(call.args[0], ast.List | ast.Tuple):
                return call.func.value.id, list(call.args[0].elts)
    return None, []
