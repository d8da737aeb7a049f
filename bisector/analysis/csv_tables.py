"""CSV tuning tables (a tuned GEMM / MoE config per shape, one row each), keyed by their leading columns.

The key is the shortest run of leading columns that tells the rows apart in both versions of the file, so a
row whose tuned values change (kernel, split, time) gives one row per changed cell, and a shape added or dropped
is a row added or removed.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Hashable, Iterator
from dataclasses import dataclass

from bisector.analysis.values import Change, Leaf, Mapping, diff_values


class CsvError(ValueError):
    """The text is not a CSV table."""


@dataclass(frozen=True)
class CsvTable:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def load_csv(text: str) -> CsvTable:
    try:
        records = [tuple(row) for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    except csv.Error as exc:
        raise CsvError(str(exc)) from None
    if not records:
        return CsvTable((), ())
    return CsvTable(records[0], tuple(records[1:]))


def diff_csv(before: CsvTable | None, after: CsvTable | None) -> Iterator[Change]:
    """A row on one side only is one change; a row on both, one change per cell that differs."""
    old, new = _keyed(before, after)
    for identity in [*old.entries, *(i for i in new.entries if i not in old.entries)]:
        was, now = old.entries.get(identity), new.entries.get(identity)
        if was is not None and now is not None:
            yield from diff_values(was[1], now[1], (now[0],))
        elif was is not None:
            yield Change((was[0],), was[1], None)
        elif now is not None:
            yield Change((now[0],), None, now[1])


def _keyed(before: CsvTable | None, after: CsvTable | None) -> tuple[Mapping, Mapping]:
    """Both versions as mappings from the key columns to the other columns, with one key width for both."""
    tables = [t for t in (before, after) if t is not None]
    width = max((len(row) for t in tables for row in t.rows), default=0)
    columns = next((k for k in range(1, width + 1) if all(_unique(t, k) for t in tables)), width)
    return (
        Mapping() if before is None else _mapping(before, columns),
        Mapping() if after is None else _mapping(after, columns),
    )


def _unique(table: CsvTable, columns: int) -> bool:
    return len({row[:columns] for row in table.rows}) == len(table.rows)


def _mapping(table: CsvTable, columns: int) -> Mapping:
    result = Mapping()
    for line, row in enumerate(table.rows, start=2):
        identity: Hashable = row[:columns]
        text = _cells(table.header, row, 0, columns)
        count = 1
        while identity in result.entries:  # a row repeated whole
            count += 1
            identity = (row[:columns], count)
            text = f"{_cells(table.header, row, 0, columns)} #{count}"
        cells = Mapping(line=line)
        for index in range(columns, len(row)):
            name = _name(table.header, index)
            cells.entries[name] = (name, Leaf(row[index], row[index], line))
        result.entries[identity] = (text, cells)
    return result


def _cells(header: tuple[str, ...], row: tuple[str, ...], start: int, end: int) -> str:
    return ", ".join(f"{_name(header, i)}={row[i]}" for i in range(start, end))


def _name(header: tuple[str, ...], index: int) -> str:
    return header[index] if index < len(header) and header[index] else f"col{index + 1}"
