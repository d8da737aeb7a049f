"""A module flag that other changed code starts to read through an import:

    SPCONV_ALLOW_TF32 = False                                      (spconv/constants.py, new)
    from spconv.constants import SPCONV_ALLOW_TF32                 (spconv/pytorch/ops.py, new)
    ... ConvGemmOps.implicit_gemm(..., use_tf32=SPCONV_ALLOW_TF32)

A new flag alone is new code, shown by its readers (python_tables._flags); but a flag the commit adds to one
module and imports by name in another changed module is a package-wide switch, and its value is what every reader
now does. A constant row for the flag, in the module that defines it (the readers keep their own rows).
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Mapping

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.python_tables import ParsedModule
from bisector.analysis.unreached import Versions

_SETTING_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")  # SPCONV_ALLOW_TF32, USE_CUTLASS: not a Class


def imported_flag_rows(modules: Mapping[str, Versions]) -> list[Finding]:
    """A constant row per module-level flag a changed module adds that another changed module newly imports."""
    rows: list[Finding] = []
    for path, (old, new) in modules.items():
        if old is None or new is None:  # a module added whole is new code
            continue
        before = _flags(old)
        added = {name: flag for name, flag in _flags(new).items() if name not in before}
        if not added:
            continue
        stem = posixpath.splitext(path)[0].replace("/", ".")
        for reader, (was, now) in modules.items():
            if reader == path or now is None:
                continue
            imported = _imported(now, stem) - (_imported(was, stem) if was is not None else set())
            for name in sorted(imported & added.keys()):
                line, value = added[name]
                detail = f"a package-wide flag, newly imported by {reader}"
                rows.append(Finding(FindingKind.CONSTANT, path, name, "", None, value, line, detail))
    return list({(row.file, row.name): row for row in rows}.values())  # one row per flag, however many readers


def _flags(module: ParsedModule) -> dict[str, tuple[int, str]]:
    """NAME -> (line, "True" / "False") of the module-level flags."""
    found: dict[str, tuple[int, str]] = {}
    for statement in module.tree.body:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            continue
        target, value = statement.targets[0], statement.value
        flag = isinstance(value, ast.Constant) and isinstance(value.value, bool)
        if flag and isinstance(target, ast.Name) and _SETTING_NAME.match(target.id):
            found[target.id] = (statement.lineno, ast.unparse(value))
    return found


def _imported(module: ParsedModule, stem: str) -> set[str]:
    """The names module imports from the module whose dotted path is stem (`from spconv.constants import X`, or a
    relative `from .constants import X`: matched by the dotted path's end)."""
    names: set[str] = set()
    for statement in module.tree.body:
        for node in [statement, *_guarded(statement)]:
            if isinstance(node, ast.ImportFrom) and node.module and _same_module(node.module, stem):
                names.update(alias.name for alias in node.names)
    return names


def _guarded(statement: ast.stmt) -> list[ast.stmt]:
    """The statements of a module-level if / try (`try: from .constants import X`)."""
    if not isinstance(statement, ast.If | ast.Try):
        return []
    handlers = [s for handler in getattr(statement, "handlers", []) for s in handler.body]
    return [*statement.body, *statement.orelse, *handlers]


def _same_module(imported: str, stem: str) -> bool:
    return stem == imported or stem.endswith(f".{imported}")
