"""A stored bisect's report or status as text, Markdown or JSON, as one string: what `bisect report|status` print
for a local store and what a server answers `--server`, the same but for the commands they advise (commands). The
local CLI prints its terminal report itself (print_text: the terminal's width and colours)."""

from __future__ import annotations

import io

from rich.console import Console

from bisector.db.jobs import JobQueue
from bisector.db.store import Store
from bisector.report.json_report import render_json
from bisector.report.markdown import render_markdown
from bisector.report.model import BisectReport
from bisector.report.resume import LOCAL, Commands
from bisector.report.status import status_lines
from bisector.report.text import REPORT_WIDTH, print_text

VIEWS = ("report", "status")
FORMATS = ("text", "markdown", "json")


def render(store: Store, bisect_id: int, view: str, output_format: str, commands: Commands = LOCAL) -> str:
    """commands: how the reader runs the commands the output advises."""
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
