"""Keyed diffs of large block-style YAML files that parse only the parts that differ.

A GEMM library's tuning update (Tensile, rocBLAS and hipBLASLt logic files) changes a few lines in each of dozens of
files of 1-4 MB, and parsing both versions of each whole costs seconds a file. A block-style file shows its
structure in its indentation: a block sequence's items start at one column with "- ", a block mapping's entries
with "key:". Both versions are split that way, level by level: a part whose text both sides share is never parsed,
and a part that is small, or that the split cannot follow, is parsed and diffed whole, as diff_values does.

A file the split cannot follow exactly (comments, anchors and aliases, tags, block scalars, explicit keys,
directives, several documents, double quotes, a single-quoted scalar over several lines, tabs, CR line ends) is
left to the whole parse (None), and so is any part that does not parse: the caller then parses the file whole and
reports its error as it always has.

The rows are diff_values' over the whole trees but for one thing: a sequence's items are matched by their text, as a
line diff matches lines, where diff_values matches them by value; items left in place are compared by value. The two
differ only where an item's text changed but its value is the same as another item's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

import yaml

from bisector.analysis.values import Change, Mapping, Node, aligned, diff_values

LARGE_YAML_BYTES = 256 << 10  # smaller files are parsed whole: the split would save little
WHOLE_PART_LINES = 200  # a differing part this small (both sides together) is parsed whole, not split further
_REFUSED = re.compile(r"[\t\r&*!|>#%\"?]")
_DOCUMENT_MARKERS = ("---", "...")
_NON_BLANK = re.compile(r"^ *\S", re.MULTILINE)
_KEY = re.compile(r"([^\s'\[\]{},:-][^'\[\]{},:]*|'[^']*'):(?: (.*)|)$")  # a plain or single-quoted key, its value

Parse = Callable[[str], Node]  # a part's text (one YAML node) to its tree, as the whole file's parse builds it


@dataclass(frozen=True)
class _Items:
    """A block sequence split into its items."""

    parts: list[_Part]


@dataclass(frozen=True)
class _Entries:
    """A block mapping split into its entries: each key's text and its value's part."""

    pairs: list[tuple[str, _Part]]


class _UnsplittableError(Exception):
    """This part's shape is not one the split follows: it is parsed whole."""


@dataclass(frozen=True)
class _Part:
    """One YAML node's lines: lines[start:end], its content from column indent on (the first line may hold its
    parent's "- " before that column)."""

    lines: list[str]
    start: int
    end: int
    indent: int

    def same_as(self, other: _Part) -> bool:
        """The same lines at the same column (a part of a file both versions share)."""
        return self.indent == other.indent and self.raw() == other.raw()

    def raw(self) -> tuple[str, ...]:
        """Its lines as written, but the first from its column on (what its parent has before it differs: the
        first item of a compact nested sequence shares its line with its parent's "- ")."""
        return (self.lines[self.start][self.indent :], *self.lines[self.start + 1 : self.end])

    def body(self) -> str:
        """The lines after the first, as written."""
        return "\n".join(self.lines[self.start + 1 : self.end])

    def text(self) -> str:
        """The node alone, dedented: what is parsed."""
        first = self.lines[self.start][self.indent :]
        if self.end - self.start == 1:
            return first
        return first + "\n" + _dedent(self.indent).sub("", self.body())


@functools.cache
def _dedent(columns: int) -> re.Pattern[str]:
    return re.compile(f"^ {{0,{columns}}}", re.MULTILINE)


# The two below match a line with its newline in front, in "\n" + text: a pattern that starts with a literal
# character is searched for that character first, where one that starts with ^ is tried at every position.
@functools.cache
def _at_column(columns: int) -> re.Pattern[str]:
    """A line whose content starts at this column."""
    return re.compile(f"\\n {{{columns}}}\\S")


@functools.cache
def _left_of(columns: int) -> re.Pattern[str]:
    """A line whose content starts left of this column."""
    return re.compile(f"\\n {{0,{columns - 1}}}\\S")


def diff_large_yaml(
    before: str, after: str, parse: Parse, *, large_bytes: int = LARGE_YAML_BYTES, part_lines: int = WHOLE_PART_LINES
) -> list[Change] | None:
    """The changes between two versions of a large block-style YAML file, or None where it is small (under
    large_bytes a side), or is not a file the split follows, or a differing part does not parse: the caller parses it
    whole. Differing parts under part_lines a side are parsed whole."""
    if len(before) + len(after) < 2 * large_bytes:
        return None
    parts = []
    for text in (before, after):
        lines = text.split("\n")
        if _REFUSED.search(text) or _has_document_markers(text) or _quote_open_at_a_line_end(text, lines):
            return None
        parts.append(_Part(lines, 0, len(lines), 0))
    try:
        return list(_Differ(parse, part_lines).diff(parts[0], parts[1], ()))
    except (yaml.YAMLError, ValueError):
        return None


def _has_document_markers(text: str) -> bool:
    return any(text.startswith(marker) or f"\n{marker}" in text for marker in _DOCUMENT_MARKERS)


def _quote_open_at_a_line_end(text: str, lines: list[str]) -> bool:
    """A single-quoted scalar over several lines (a line with an odd number of quotes; '' inside one is two)."""
    return "'" in text and any(line.count("'") % 2 for line in lines if "'" in line)


class _Differ:
    def __init__(self, parse: Parse, part_lines: int) -> None:
        self._parse, self._part_lines = parse, part_lines
        self._keys: dict[str, tuple[Hashable, str]] = {}

    def diff(self, before: _Part, after: _Part, path: tuple[str, ...]) -> Iterator[Change]:
        if before.same_as(after):
            return
        if (before.end - before.start) + (after.end - after.start) >= 2 * self._part_lines:
            try:
                old_shape, new_shape = _shape(before), _shape(after)
                if isinstance(old_shape, _Items) and isinstance(new_shape, _Items):
                    yield from self._diff_items(old_shape.parts, new_shape.parts, path)
                    return
                if isinstance(old_shape, _Entries) and isinstance(new_shape, _Entries):
                    old_entries, new_entries = self._entries(old_shape.pairs), self._entries(new_shape.pairs)
                    yield from self._diff_entries(old_entries, new_entries, path)
                    return
            except _UnsplittableError:
                pass  # raised before anything was yielded: the shapes and keys are read first
        yield from diff_values(self._parse(before.text()), self._parse(after.text()), path)

    def _diff_items(self, before: list[_Part], after: list[_Part], path: tuple[str, ...]) -> Iterator[Change]:
        """As values._diff_sequences, but the items are matched by their text (as a line diff matches lines): items
        of different texts are paired where the matching leaves them in place, and compared by value there."""
        old_raw, new_raw = [part.raw() for part in before], [part.raw() for part in after]
        shared = set(old_raw) & set(new_raw)
        old_keys: list[Hashable] = [raw if raw in shared else ("old", i) for i, raw in enumerate(old_raw)]
        new_keys: list[Hashable] = [raw if raw in shared else ("new", j) for j, raw in enumerate(new_raw)]
        for i, j in aligned(old_keys, new_keys):
            if i is not None and j is not None:
                yield from self.diff(before[i], after[j], (*path, str(j)))
            elif i is not None:
                yield Change((*path, str(i)), self._parse(before[i].text()), None)
            elif j is not None:
                yield Change((*path, str(j)), None, self._parse(after[j].text()))

    def _entries(self, parts: list[tuple[str, _Part]]) -> dict[Hashable, tuple[str, _Part]]:
        entries: dict[Hashable, tuple[str, _Part]] = {}
        for key_text, value in parts:
            identity, display = self._key(key_text)
            if identity in entries:
                raise _UnsplittableError  # a repeated key: the last one wins, as the whole parse decides
            entries[identity] = (display, value)
        return entries

    def _key(self, text: str) -> tuple[Hashable, str]:
        """A key's identity and display text, as the whole parse makes them (keys repeat: each text once)."""
        if text not in self._keys:
            tree = self._parse(f"{text}: 0")
            if not isinstance(tree, Mapping) or len(tree.entries) != 1:
                raise _UnsplittableError
            ((identity, (display, _)),) = tree.entries.items()
            self._keys[text] = (identity, display)
        return self._keys[text]

    def _diff_entries(
        self, old: dict[Hashable, tuple[str, _Part]], new: dict[Hashable, tuple[str, _Part]], path: tuple[str, ...]
    ) -> Iterator[Change]:
        """As values._diff_mappings: the before side's keys in order, then the keys only the after side has."""
        for key in [*old, *(k for k in new if k not in old)]:
            if key in old and key in new:
                yield from self.diff(old[key][1], new[key][1], (*path, new[key][0]))
                continue
            display, part = new[key] if key in new else old[key]
            value = self._parse(part.text())
            yield from diff_values(None if key in new else value, value if key in new else None, (*path, display))


class _Lines:
    """A part's lines read once: those at its column (heads of its items or entries), whether a line below a head
    sits less than two columns deeper (shallow), and, when asked, each head's first non-blank line below it."""

    def __init__(self, part: _Part) -> None:
        column, body = part.indent, part.body()  # body: the lines after the first; its line k is part.start + 1 + k
        lines = "\n" + body  # a match's start in it is where its line starts in body
        if column and _left_of(column).search(lines):
            raise _UnsplittableError  # a line less indented than the part: not a part the split can follow
        self._start, self._body = part.start, body
        self.heads = [part.start]
        self._below = [(0, 0)]  # per head: where the lines below it start in body, and that line's number in body
        self._stops: list[int] = []  # per head but the first: where its line starts in body
        line, position = 0, 0
        for match in _at_column(column).finditer(lines):
            line += body.count("\n", position, match.start())
            position = match.start()
            self.heads.append(part.start + 1 + line)
            self._stops.append(position)
            end = body.find("\n", position)
            self._below.append((len(body) if end < 0 else end + 1, line + 1))
        self._stops.append(len(body))
        self.shallow = _at_column(column + 1).search(lines) is not None

    def first_inner(self, index: int) -> int | None:
        """The line of the first non-blank line below the index-th head, before the next head; None if none."""
        begin, begin_line = self._below[index]
        found = _NON_BLANK.search(self._body, begin, self._stops[index])
        if found is None:
            return None
        return self._start + 1 + begin_line + self._body.count("\n", begin, found.start())


def _shape(part: _Part) -> _Items | _Entries | None:
    """The items of a block sequence with a collection among them (all scalars make one Leaf, which the whole
    parse gives), the entries of a block mapping, None for anything else (parsed whole)."""
    first = part.lines[part.start][part.indent :]
    if first.startswith("- ") or first == "-":
        return _sequence(part, _Lines(part))
    if _KEY.match(first):
        return _mapping(part, _Lines(part))
    return None


def _sequence(part: _Part, found: _Lines) -> _Items | None:
    column = part.indent
    if found.shallow:
        raise _UnsplittableError  # an item's lines must sit below its content, two columns in
    items = []
    for head, end in zip(found.heads, [*found.heads[1:], part.end], strict=True):
        line = part.lines[head][column:]
        if not (line.startswith("- ") or line == "-"):
            raise _UnsplittableError
        items.append(_Part(part.lines, head, end, column + 2))
    if all(_is_scalar(item) and found.first_inner(index) is None for index, item in enumerate(items)):
        return None
    return _Items(items)


def _mapping(part: _Part, found: _Lines) -> _Entries:
    column = part.indent
    entries = []
    for index, (head, end) in enumerate(zip(found.heads, [*found.heads[1:], part.end], strict=True)):
        match = _KEY.match(part.lines[head][column:])
        if match is None:
            raise _UnsplittableError
        rest, inner = match.group(2), found.first_inner(index)
        if rest:
            if inner is not None:
                raise _UnsplittableError  # a value that goes on over the next lines
            value = _Part([rest], 0, 1, 0)
        elif inner is not None:
            line = part.lines[inner]
            value = _Part(part.lines, inner, end, len(line) - len(line.lstrip(" ")))
        else:
            value = _Part([""], 0, 1, 0)  # null
        entries.append((match.group(1), value))
    return _Entries(entries)


def _is_scalar(item: _Part) -> bool:
    """An item whose first line the whole parse makes a plain Leaf: no flow collection, no nested block (the caller
    checks that no line follows)."""
    content = item.lines[item.start][item.indent :]
    return not (content[:1] in ("[", "{") or content.startswith("- ") or content == "-" or _KEY.match(content))
