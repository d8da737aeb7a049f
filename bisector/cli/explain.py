"""`bisect explain` (what a commit changes in dispatch, no bisect needed) and `bisect minimize` (the
smallest part of a culprit that still fails)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    pass
from bisector.cli.support import (
    db_option,
    format_option,
    observer,
    out_console,
    print_report,
    stoppable_by_signals,
    translated_errors,
)

DEMO_VERIFY_M = 4  # the demo's test verifies k=3 speculative tokens: m = k + 1 (kernels/demo.py)


@click.command()
@click.argument("rev")
@click.option("--repo", type=click.Path(file_okay=False), default=".", show_default=True, help="The git repository.")
@click.option(
    "--verify-m",
    type=click.IntRange(min=1),
    default=DEMO_VERIFY_M,
    show_default=True,
    help="The m of the speculative verify batch (k + 1) whose path the table shows; the demo's test uses k=3.",
)
@format_option
def explain(rev: str, repo: str, verify_m: int, output_format: str) -> None:
    """Show which dispatch tables, thresholds and tuning files a commit changes (no bisect needed)."""
    from bisector.analysis import explain_commit, explanation_json, render_markdown, text_renderables

    with translated_errors():
        explanation = explain_commit(repo, rev, verify_m=verify_m)
    if output_format == "json":
        click.echo(json.dumps(explanation_json(explanation), indent=2))
    elif output_format == "markdown":
        click.echo(render_markdown(explanation))
    else:
        console = out_console()
        for renderable in text_renderables(explanation):
            console.print(renderable)


@click.command()
@click.argument("bisect_id", type=int)
@db_option
@format_option
def minimize(bisect_id: int, db_url: str | None, output_format: str) -> None:
    """Find the smallest set of the culprit's changes (hunks, table entries) that still fails."""
    from bisector.runner.wiring import make_coordinator, open_store

    with stoppable_by_signals(), translated_errors(), open_store(db_url) as store:
        make_coordinator(store, observer()).minimize(bisect_id)
        print_report(store, bisect_id, output_format)
