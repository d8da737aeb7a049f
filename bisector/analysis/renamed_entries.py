"""Table rows that only follow a renaming: the same values under other names are no change.

@triton.autotune(configs, key=["M"]) def proprocess(...)  ->  the same on def preprocess(...)
@triton.autotune(..., key=["num_cols"]) def k(x, num_cols)  ->  key=["NUM_COLS"] def k(x, NUM_COLS: tl.constexpr)
"""

from __future__ import annotations

import ast

from bisector.analysis.code_shape import FunctionNode, parameter_names
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.values import Node


def without_renames(
    old: dict[str, tuple[FindingKind, Node]], new: dict[str, tuple[FindingKind, Node]]
) -> tuple[dict[str, tuple[FindingKind, Node]], dict[str, tuple[FindingKind, Node]]]:
    """A decorator entry that only moved to a renamed function (proprocess@triton.autotune ->
    preprocess@triton.autotune, the same configs) is no change: both sides are left out."""
    added = {name: entry for name, entry in new.items() if name not in old and "@" in name}
    renamed: set[str] = set()
    for name, (kind, value) in old.items():
        if name in new or "@" not in name:
            continue
        decorator = name.split("@", 1)[1]
        match = next(
            (
                other
                for other, (other_kind, other_value) in added.items()
                if other.split("@", 1)[1] == decorator
                and other_kind is kind
                and other_value.canonical == value.canonical
            ),
            None,
        )
        if match is not None:
            renamed.update((name, match))
            del added[match]
    if not renamed:
        return old, new
    return (
        {name: entry for name, entry in old.items() if name not in renamed},
        {name: entry for name, entry in new.items() if name not in renamed},
    )


def without_renamed_keys(
    findings: list[Finding], old: dict[str, FunctionNode], new: dict[str, FunctionNode]
) -> list[Finding]:
    """An autotune key names the kernel's parameters: a key entry renamed with the parameter it names (num_columns
    -> NUM_COLUMNS, made a constexpr) keys the same tuning, so its row is left out."""
    return [f for f in findings if not _renamed_key(f, old, new)]


def _renamed_key(row: Finding, old: dict[str, FunctionNode], new: dict[str, FunctionNode]) -> bool:
    kernel = row.name.split("@", 1)[0]
    if row.kind is not FindingKind.AUTOTUNE_CONFIG or not row.key.startswith("[key]") or "@" not in row.name:
        return False
    if kernel not in old or kernel not in new or row.before is None or row.after is None:
        return False
    before, after = _names(row.before), _names(row.after)
    if before is None or after is None:
        return False
    renamed = _renamed_parameters(parameter_names(old[kernel]), parameter_names(new[kernel]))
    return [renamed.get(name, name) for name in before] == after


def _names(text: str) -> list[str] | None:
    """The key's names ("['M', 'N']" or one of them, "'M'"), or None when it is no literal of strings."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    names = [value] if isinstance(value, str) else value if isinstance(value, list | tuple) else None
    return list(names) if names is not None and all(isinstance(n, str) for n in names) else None


def _renamed_parameters(before: list[str], after: list[str]) -> dict[str, str]:
    """Parameters one version has and the other not, paired when they are one name in another case or spelling
    (num_columns / NUM_COLUMNS / numColumns)."""
    added = {_spelling(name): name for name in after if name not in before}
    return {name: added[_spelling(name)] for name in before if name not in after and _spelling(name) in added}


def _spelling(name: str) -> str:
    return name.replace("_", "").lower()
