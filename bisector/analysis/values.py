"""Value trees of literal tables, and the keyed diff of two of them.

Python tables, JSON/YAML/TOML tuning files and C/C++ initializer lists all become trees of Leaf, Mapping and
Sequence; diff_values walks two trees and yields one Change per entry that differs, keyed by its path, so each
source format only has to build trees. A sequence of scalars is one Leaf (its rows would shift on insertion).
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

from bisector.analysis.findings import Finding, FindingKind

MAX_TEXT = 200  # longer values are cut in the display text (the comparison uses the whole value)


@dataclass(frozen=True)
class Symbol:
    """A value the analysis cannot evaluate (a call, an attribute, a lambda), compared by its source text."""

    text: str


@dataclass(eq=False)
class Leaf:
    value: Hashable
    text: str
    line: int | None = None
    compound: bool = False  # a whole sequence of scalars, e.g. the tuple (144, 7168)

    @cached_property
    def canonical(self) -> Hashable:
        return ("leaf", self.value)


@dataclass(eq=False)
class Mapping:
    """Entries keyed by the key's identity; each holds the key's display text and the value."""

    entries: dict[Hashable, tuple[str, Node]] = field(default_factory=dict)
    line: int | None = None
    tag: str = ""  # what built it, when that matters ("triton.Config": configs keyed by meta-parameters)

    @cached_property
    def canonical(self) -> Hashable:
        return ("map", frozenset((k, v.canonical) for k, (_, v) in self.entries.items()))


@dataclass(eq=False)
class Sequence:
    """A list or tuple whose items are not all scalars (tables of configs, rows of a 2-D array)."""

    items: list[Node]
    brackets: str = "[]"
    line: int | None = None

    @cached_property
    def canonical(self) -> Hashable:
        return ("seq", tuple(item.canonical for item in self.items))


Node = Leaf | Mapping | Sequence


def sequence(items: list[Node], brackets: str = "[]", line: int | None = None, *, unordered: bool = False) -> Node:
    """A sequence node, or one Leaf when every item is a scalar Leaf. unordered: a set (compared as a set)."""
    if unordered:
        items = sorted(items, key=lambda item: repr(item.canonical))
    if all(isinstance(item, Leaf) and not item.compound for item in items):
        leaves = [item for item in items if isinstance(item, Leaf)]
        values = tuple(leaf.value for leaf in leaves)
        body = ", ".join(leaf.text for leaf in leaves)
        if brackets == "()" and len(leaves) == 1:
            body += ","
        value: Hashable = frozenset(values) if unordered else (brackets, values)
        return Leaf(value, f"{brackets[0]}{body}{brackets[1]}", line, compound=True)
    return Sequence(items, brackets, line)


def render(node: Node) -> str:
    """Display text of a node, cut to MAX_TEXT characters."""
    text = _render(node)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _render(node: Node) -> str:
    if isinstance(node, Leaf):
        return node.text
    if isinstance(node, Mapping):
        return "{" + ", ".join(f"{key}: {_render(value)}" for key, value in node.entries.values()) + "}"
    return node.brackets[0] + ", ".join(_render(item) for item in node.items) + node.brackets[1]


def line_of(node: Node | None) -> int | None:
    return None if node is None else node.line


@dataclass(frozen=True)
class Change:
    path: tuple[str, ...]  # display text of each key or index from the table's root
    before: Node | None
    after: Node | None

    @property
    def key(self) -> str:
        return "".join(f"[{part}]" for part in self.path)

    @property
    def line(self) -> int | None:
        return line_of(self.after) if self.after is not None else line_of(self.before)


def diff_values(before: Node | None, after: Node | None, path: tuple[str, ...] = ()) -> Iterator[Change]:
    """The changed entries between two trees; a missing side is None (the whole tree added or removed)."""
    if before is None and after is None:
        return
    if before is not None and after is not None and before.canonical == after.canonical:
        return
    if isinstance(before, Mapping | None) and isinstance(after, Mapping | None):
        yield from _diff_mappings(before, after, path)
    elif isinstance(before, Sequence) and isinstance(after, Sequence):
        yield from _diff_sequences(before, after, path)
    elif before is None and isinstance(after, Sequence):
        for index, item in enumerate(after.items):
            yield Change((*path, str(index)), None, item)
    elif after is None and isinstance(before, Sequence):
        for index, item in enumerate(before.items):
            yield Change((*path, str(index)), item, None)
    else:
        yield Change(path, before, after)


def _diff_mappings(before: Mapping | None, after: Mapping | None, path: tuple[str, ...]) -> Iterator[Change]:
    old = before.entries if before is not None else {}
    new = after.entries if after is not None else {}
    for key in [*old, *(k for k in new if k not in old)]:
        text = new[key][0] if key in new else old[key][0]
        yield from diff_values(old[key][1] if key in old else None, new[key][1] if key in new else None, (*path, text))


def _diff_sequences(before: Sequence, after: Sequence, path: tuple[str, ...]) -> Iterator[Change]:
    old = [item.canonical for item in before.items]
    new = [item.canonical for item in after.items]
    for i, j in aligned(old, new):
        if i is not None and j is not None:
            yield from diff_values(before.items[i], after.items[j], (*path, str(j)))
        elif i is not None:
            yield Change((*path, str(i)), before.items[i], None)
        elif j is not None:
            yield Change((*path, str(j)), None, after.items[j])


def aligned(old: list[Hashable], new: list[Hashable]) -> Iterator[tuple[int | None, int | None]]:
    """The items of two sequences that differ, aligned as a line diff aligns lines (equal keys matched): (i, j) for
    an item changed in place, then (i, None) for each one removed and (None, j) for each one added in a stretch."""
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            yield from zip(range(i1, i2), range(j1, j2), strict=True)
            continue
        yield from ((i, None) for i in range(i1, i2))
        yield from ((None, j) for j in range(j1, j2))


def diff_entries(
    path: str, old: dict[str, tuple[FindingKind, Node]], new: dict[str, tuple[FindingKind, Node]]
) -> list[Finding]:
    """Keyed rows for every entry of named value trees (tables, constants) that differs between two scans."""
    findings: list[Finding] = []
    for name in [*old, *(n for n in new if n not in old)]:
        kind = new[name][0] if name in new else old[name][0]
        for change in diff_values(old[name][1] if name in old else None, new[name][1] if name in new else None):
            findings.append(
                Finding(
                    kind=kind,
                    file=path,
                    name=name,
                    key=change.key,
                    before=None if change.before is None else render(change.before),
                    after=None if change.after is None else render(change.after),
                    line=change.line,
                )
            )
    return findings
