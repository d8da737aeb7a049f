"""Autotune pruners a commit adds or changes: the functions that decide which configs an autotuner tries.

    @triton.autotune(configs=..., key=[...], prune_configs_by={"early_config_prune": prune_by_smem})

A pruner drops configs (by shared memory, by the problem's shape) before any runs, so a new one changes the
config a kernel ends with, as much as a changed config list does; a changed one does when a statement it adds or
removes reads its configs or arguments, or a value made from them (`configs = other_prune(configs, args)`, `if
smem(config) <= limit`; not a device query moved to another API). A function the commit adds that a pruner hands
its configs to (the pruning moved into a helper) is a pruner too; a new one that hands back its configs as they
came (it only logs them) is none. Each gets an autotune-config row under its own name, unless a row names it
already (a changed pruning condition's row). Module-level functions count, under a try / if / with too
(`try: import triton`), and classes' methods.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator

from bisector.analysis.code_shape import (
    FunctionNode,
    ParsedSource,
    last_name,
    module_functions,
    positional_parameters,
    source_lines,
    statement_blocks,
)
from bisector.analysis.findings import Finding, FindingKind

PRUNE_KEY = "early_config_prune"


def with_pruner_rows(
    path: str, before: ParsedSource | None, after: ParsedSource | None, rows: list[Finding]
) -> list[Finding]:
    """The module's rows and an autotune-config row for each pruner (see the module's docstring) the commit adds or
    whose code it changes."""
    if after is None or not any(PRUNE_KEY in line for line in after.lines):
        return rows  # the cheap test first: most modules name no pruner
    new = dict(module_functions(after.tree.body, under_blocks=True))
    old = dict(module_functions(before.tree.body, under_blocks=True)) if before is not None else {}
    pruners = {name: kernel for name, kernel in _pruners(after.tree) if name in new}
    for name in list(pruners):
        params = positional_parameters(new[name])[:1]
        helpers = {last_name(n.func) for n in ast.walk(new[name]) if isinstance(n, ast.Call) and _reads(n, params)}
        pruners.update((h, pruners[name]) for h in sorted(helpers) if h in new and h not in old and h not in pruners)
    named = {row.name for row in rows}
    added = []
    for name, kernel in pruners.items():
        node, was = new[name], old.get(name)
        if name in named or (was is None and _keeps_all(node)):
            continue
        if was is not None and before is not None and _same(before, was, after, node):
            continue
        added.append(
            Finding(
                kind=FindingKind.AUTOTUNE_CONFIG,
                file=path,
                name=name,
                before=None if was is None else f"lines {was.lineno}-{was.end_lineno}",
                after=f"lines {node.lineno}-{node.end_lineno}",
                line=node.lineno,
                detail=f"prunes the configs of {kernel}",
            )
        )
    return rows + added


def _same(before: ParsedSource, was: FunctionNode, after: ParsedSource, node: FunctionNode) -> bool:
    """Whether the pruner prunes the same: its text, or every statement it adds or removes reads none of what its
    arguments give it."""
    if source_lines(before, was) == source_lines(after, node):
        return True
    old, new = _statements(was), _statements(node)
    old_dumps, new_dumps = {dump for dump, _ in old}, {dump for dump, _ in new}
    changed = [(s, was) for s in old if s[0] not in new_dumps] + [(s, node) for s in new if s[0] not in old_dumps]
    derived = functools.cache(_derived)  # once per version of the function, not once per changed statement
    return not any(_reads(statement, derived(function)) for (_, statement), function in changed)


def _keeps_all(function: FunctionNode) -> bool:
    """Whether the function hands back its configs as they came (a pruner that only logs): it returns its first
    parameter, never rebinds it and calls no method of it."""
    configs, returns = positional_parameters(function)[:1], False
    for node in ast.walk(function):
        if isinstance(node, ast.Yield | ast.YieldFrom):
            return False  # a generator of the configs it keeps
        if isinstance(node, ast.Return):
            if not (isinstance(node.value, ast.Name) and node.value.id in configs):
                return False
            returns = True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del) and node.id in configs:
            return False
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in configs:
            return False
    return returns


def _statements(function: FunctionNode) -> list[tuple[str, ast.AST]]:
    """(dump, node) of each simple statement and each compound statement's header (its test, its iterable)."""
    out: list[tuple[str, ast.AST]] = []
    for node in ast.walk(function):
        if node is function or not isinstance(node, ast.stmt):
            continue
        if isinstance(node, ast.If | ast.While):
            out.append((ast.dump(node.test), node.test))
        elif isinstance(node, ast.For | ast.AsyncFor):
            header = ast.Tuple([node.target, node.iter], ast.Load())
            out.append((ast.dump(header), header))
        elif not any(statement_blocks(node)):
            out.append((ast.dump(node), node))
    return out


def _derived(function: FunctionNode) -> set[str]:
    """The pruner's configs and arguments (its first two parameters) and the names assigned from them."""
    derived = set(positional_parameters(function)[:2])
    for _ in range(2):  # a loop's later statement can feed an earlier one
        for node in ast.walk(function):
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                source: ast.AST = node.value
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                targets, source = [node.target], node.iter
            else:
                continue
            if _reads(source, derived):
                derived.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return derived


def _reads(node: ast.AST, names: set[str] | list[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _pruners(tree: ast.Module) -> Iterator[tuple[str, str]]:
    """(pruner, kernel) for each autotune decorator's `prune_configs_by={"early_config_prune": f}`."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            if not isinstance(decorator, ast.Call) or not last_name(decorator.func).endswith("autotune"):
                continue
            for keyword in decorator.keywords:
                if keyword.arg == "prune_configs_by" and isinstance(keyword.value, ast.Dict):
                    for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
                        if isinstance(key, ast.Constant) and key.value == PRUNE_KEY and last_name(value):
                            yield last_name(value), node.name
