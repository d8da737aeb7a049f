"""A stored bisect's report or status as text, Markdown or JSON: what `bisect report|status` print for a local
store, so that `--server` prints the same, but for the commands they advise, which carry the flags that reach the
server (commands)."""

from __future__ import annotations

import io

from rich.console import Console

from bisector.db.jobs import JobQueue
from bisector.db.store import Store
from bisector.report import REPORT_WIDTH, BisectReport, print_text, render_json, render_markdown, status_lines
from bisector.report.resume import Commands

VIEWS = ("report", "status")
FORMATS = ("text", "markdown", "json")


def render(store: Store, bisect_id: int, view: str, output_format: str, commands: Commands) -> str:
    report = BisectReport.load(store, bisect_id)
    if output_format == "json":
        return render_json(report, commands)
    if view == "status":
        lines = status_lines(report, JobQueue(store).waiting(bisect_id), commands)
        if output_format == "markdown":
            return "\n".join([f"**{lines[0]}**", "", *[f"    {line}" for line in lines[1:]]])
        return "\n".join(lines)
    if output_format == "markdown":
        return render_markdown(report, commands)
    buffer = io.StringIO()
    print_text(Console(file=buffer, highlight=False, width=REPORT_WIDTH, force_terminal=False), report, commands)
    return buffer.getvalue().rstrip("\n")
