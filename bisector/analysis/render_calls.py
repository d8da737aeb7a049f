"""The traced-call section of the report (per function and call arguments: result at last good -> first bad) and
the note on the traced re-runs, in the three formats."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from bisector.analysis.call_trace import CallTraceDiff
from bisector.analysis.findings import ABSENT_TEXT
from bisector.analysis.render_static import MAX_ROWS, md_cell, md_table

TITLE = "traced functions: result per call (last good -> first bad)"


def _summary(calls: CallTraceDiff) -> str:
    traced = ", ".join(calls.functions) or "nothing"
    return f"{len(calls.rows)} calls changed, {calls.unchanged} unchanged; traced {traced}"


def _cells(calls: CallTraceDiff) -> list[list[str]]:
    return [[r.function, r.args or "()", r.before or ABSENT_TEXT, r.after or ABSENT_TEXT] for r in calls.rows]


HEADERS = ["function", "call", "at last good", "at first bad"]


def calls_renderables(calls: CallTraceDiff | None, note: str | None) -> list[RenderableType]:
    out: list[RenderableType] = []
    if calls is not None:
        table = Table(title=TITLE, caption=_summary(calls))
        for header in HEADERS:
            table.add_column(header, overflow="fold")
        for cells in _cells(calls)[:MAX_ROWS]:
            table.add_row(*(Text(cell) for cell in cells))
        out.append(table)
    if note:
        out.append(Group(Text(f"traced re-runs: {note}", style="italic")))
    return out


def calls_markdown(calls: CallTraceDiff | None, note: str | None) -> list[str]:
    out: list[str] = []
    if calls is not None:
        out += [f"**{TITLE[0].upper()}{TITLE[1:]}** ({_summary(calls)})", ""]
        if calls.rows:
            out += [*md_table(HEADERS, _cells(calls)[:MAX_ROWS]), ""]
    if note:
        out += [f"_Traced re-runs: {md_cell(note)}_", ""]
    return out


def calls_json(calls: CallTraceDiff | None, note: str | None) -> dict[str, object]:
    return {
        "calls": None
        if calls is None
        else {
            "functions": list(calls.functions),
            "unchanged": calls.unchanged,
            "rows": [
                {"function": r.function, "args": r.args, "before": r.before, "after": r.after} for r in calls.rows
            ],
        },
        "trace_note": note,
    }
