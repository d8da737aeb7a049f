"""Autotune config lists built in code: a function or a module name whose code makes `Config(...)` objects in a
comprehension, a loop or a returned list (`def get_configs(): return [triton.Config(...) for BM in [64, 128]]`,
`configs = [Config(...) if HAS_WS else Config(...) for BM in ...]`).

Such a list is what an autotuner tries, yet it is no literal table, so python_tables shows it only where a literal
part of it is a table of its own. When the builder's code changes (comments, blank lines and docstrings aside) it
is one autotune row under the builder's name; a builder whose name python_tables already gives rows is left to
those rows, and a builder added or removed whole is shown by the decorators that start or stop using it.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable, Iterator

from bisector.analysis.code_shape import ParsedSource, code_shape, docstring_lines, module_statements, statement_blocks
from bisector.analysis.findings import Finding, FindingKind, short_text

CONFIG_CALL_NAME = "Config"  # triton.Config, Config, tl.Config: what @triton.autotune(configs=...) takes
Builder = ast.FunctionDef | ast.AsyncFunctionDef | ast.Assign | ast.AnnAssign


def with_builder_rows(
    path: str, before: ParsedSource | None, after: ParsedSource | None, rows: list[Finding]
) -> list[Finding]:
    """The module's rows with one autotune row per config builder whose code differs between the two versions,
    less the rows of the module tables the commit adds for a builder with a row to read (`bm_range = [128]` for
    `for BM in bm_range`, directly or through another module name): the builder's row shows them."""
    found = _builder_rows(path, before, after, rows)
    if not found or after is None:
        return rows
    read = _names_read(after, {row.name for row in found})
    return [row for row in rows if not (_added_table(row) and _base_name(row.name) in read)] + found


def _added_table(row: Finding) -> bool:
    return row.kind in (FindingKind.TABLE_ENTRY, FindingKind.CONSTANT) and row.before is None


def _base_name(name: str) -> str:
    return name.split(" (", 1)[0].split("[", 1)[0]


def _names_read(module: ParsedSource, builders: set[str]) -> set[str]:
    """The names the builders read, and the names the module-level assignments of those names read."""
    definitions = _first_definitions(module)
    read = {n.id for name in builders if name in definitions for n in ast.walk(definitions[name])
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}  # fmt: skip
    for statement in module_statements(module.tree.body):
        if not isinstance(statement, ast.Assign):
            continue
        targets = {t.id for target in statement.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
        if targets & read:
            read |= {n.id for n in ast.walk(statement.value) if isinstance(n, ast.Name)}
    return read


def _builder_rows(
    path: str, before: ParsedSource | None, after: ParsedSource | None, rows: Iterable[Finding]
) -> list[Finding]:
    """One autotune row per config builder whose code differs between the two versions of a module, unless
    `rows` (the module's other rows) already name it or show its result (a table row whose value calls it:
    `CONFIGS = make_configs([512], [1])`)."""
    if before is None or after is None:
        return []
    rows = list(rows)
    named = {row.name for row in rows}
    called = " ".join(text for row in rows for text in (row.before, row.after) if text)
    findings = []
    old_definitions = _first_definitions(before)
    for name, node in _first_definitions(after).items():
        old_node = old_definitions.get(name)
        if old_node is None or _named_already(name, named) or f"{name.rsplit('.', 1)[-1]}(" in called:
            continue
        old_text, text = _source(before, old_node), _source(after, node)
        if old_text == text or CONFIG_CALL_NAME not in "".join(text) or not _builds_configs(node):
            continue  # the cheap tests first: most definitions are the same on both sides
        if not _builds_configs(old_node) or code_shape(old_node) == code_shape(node):
            continue
        removed, added = _changed_lines(old_text, text)
        findings.append(
            Finding(
                kind=FindingKind.AUTOTUNE_CONFIG,
                file=path,
                name=name,
                before=short_text(removed) if removed else None,
                after=short_text(added) if added else None,
                line=node.lineno,
                detail="autotune configs built in code changed",
            )
        )
    return findings


def _named_already(name: str, named: set[str]) -> bool:
    return any(other == name or (other.startswith(name) and not _continues_name(other[len(name)])) for other in named)


def _continues_name(char: str) -> bool:
    return char.isalnum() or char == "_"


def _first_definitions(module: ParsedSource) -> dict[str, Builder]:
    """Name -> the first module-level function, method or assignment (in `if` / `try` blocks too) of that name."""
    found: dict[str, Builder] = {}
    for name, node in _definitions(module.tree.body, ""):
        found.setdefault(name, node)
    return found


def _source(module: ParsedSource, node: Builder) -> list[str]:
    """The definition's source lines, less its docstring."""
    skipped = docstring_lines(node)
    lines = range(node.lineno, (node.end_lineno or node.lineno) + 1)
    return [module.lines[line - 1] for line in lines if line not in skipped]


def _definitions(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, Builder]]:
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{statement.name}", statement
        elif isinstance(statement, ast.ClassDef) and not prefix:
            yield from _definitions(statement.body, f"{statement.name}.")
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            if isinstance(target := statement.targets[0], ast.Name):
                yield f"{prefix}{target.id}", statement
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
            yield f"{prefix}{statement.target.id}", statement
        elif isinstance(statement, ast.If | ast.Try) and not prefix:
            for block in statement_blocks(statement):
                yield from _definitions(block, prefix)


def _builds_configs(node: Builder) -> bool:
    """A module name bound to code that makes Config objects (other than a plain list of Config calls: a literal
    table), or a function that returns Config objects (made in its return value or collected in a local it
    returns). Config calls in a kernel's autotune decorator are its entries (python_tables), and a function that
    only makes one on the way (an autotuner's fallback) builds no list."""
    if isinstance(node, ast.Assign | ast.AnnAssign):
        value = node.value
        if value is None or (isinstance(value, ast.List | ast.Tuple) and all(map(_is_config_call, value.elts))):
            return False
        return _makes_configs(value)
    collected: set[str] = set()
    returns: list[ast.expr] = []
    for child in ast.walk(ast.Module(body=node.body, type_ignores=[])):
        if isinstance(child, ast.Return) and child.value is not None:
            returns.append(child.value)
        elif isinstance(child, ast.Assign | ast.AugAssign) and _makes_configs(child.value):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            collected.update(target.id for target in targets if isinstance(target, ast.Name))
        elif _collects_configs(child) and isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
            collected.add(getattr(child.func.value, "id", ""))
    return any(_makes_configs(value) or (isinstance(value, ast.Name) and value.id in collected) for value in returns)


def _collects_configs(node: ast.AST) -> bool:
    """`xs.append(Config(...))`, `xs.extend([...])` on a local name."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    return node.func.attr in ("append", "extend") and isinstance(node.func.value, ast.Name) and _makes_configs(node)


def _makes_configs(node: ast.AST) -> bool:
    return any(_is_config_call(child) for child in ast.walk(node))


def _is_config_call(node: ast.AST) -> bool:
    """A Triton-style config: `Config({...}, num_warps=...)`, `triton.Config(kwargs=..., num_stages=...)`; a
    `Config()` of another library (no arguments) is none."""
    if not isinstance(node, ast.Call) or not (node.args or node.keywords):
        return False
    function = node.func
    if isinstance(function, ast.Attribute):
        return function.attr == CONFIG_CALL_NAME
    return isinstance(function, ast.Name) and function.id == CONFIG_CALL_NAME


def _changed_lines(old: list[str], new: list[str]) -> tuple[str, str]:
    """The first removed and the first added code line (comments and blank lines aside)."""
    old_code, new_code = _code_lines(old), _code_lines(new)
    removed = added = ""
    for tag, old_lo, old_hi, new_lo, new_hi in difflib.SequenceMatcher(None, old_code, new_code).get_opcodes():
        if tag == "equal":
            continue
        removed = removed or " ".join(old_code[old_lo:old_hi][:1])
        added = added or " ".join(new_code[new_lo:new_hi][:1])
        if removed and added:
            break
    return removed, added


def _code_lines(lines: list[str]) -> list[str]:
    return [text for line in lines if (text := _strip(line))]


def _strip(line: str) -> str:
    """The line without a trailing comment (when no quote could hold the #) and outer blanks."""
    if "#" in line and "'" not in line and '"' not in line:
        line = line.split("#", 1)[0]
    return line.strip()
