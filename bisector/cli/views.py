"""Reading stored bisects: `bisect status`, `report`, `show`, `log` (as `git bisect log` prints), `list` and
`stats`."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    pass
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rich.table import Table

    from bisector.db.queries import BisectSummary
from bisector.cli.service import print_remote, server_options
from bisector.cli.support import (
    db_option,
    format_option,
    out_console,
    output_format_option,
    print_report,
    print_status,
    translated_errors,
)

F = TypeVar("F", bound=Callable[..., Any])


@click.command()
@click.argument("bisect_id", type=int)
@db_option
@format_option
@server_options
def status(bisect_id: int, db_url: str | None, output_format: str, server: str | None, token_file: str | None) -> None:
    """Show in a few lines where a bisect stands: state, progress, coordinator, last steps (`bisect report`: all)."""
    if server is not None:
        return print_remote(server, token_file, bisect_id, "status", output_format)
    from bisector.runner.wiring import open_store

    with translated_errors(), open_store(db_url, read_only=True) as store:
        end_dead_reruns_where_writable(store, db_url, bisect_id)
        print_status(store, bisect_id, output_format)


def end_dead_reruns_where_writable(store: Any, db_url: str | None, bisect_id: int) -> None:
    """Store the steps of the bisect's gone reruns as interrupted (reruns.end_dead_reruns), where the
    store can be written: a read-only store is shown as it is."""
    from datetime import UTC, datetime

    from bisector.runner.reruns import dead_rerun_commits, end_dead_reruns
    from bisector.runner.wiring import open_store
    from bisector.vocab.errors import StoreError

    now = datetime.now(UTC)
    if dead_rerun_commits(store.get_bisect(bisect_id).extra, now):
        with contextlib.suppress(StoreError), open_store(db_url) as writable:
            end_dead_reruns(writable, bisect_id, now)


@click.command(name="report")
@click.argument("bisect_id", type=int)
@db_option
@format_option
@server_options
def report_command(
    bisect_id: int, db_url: str | None, output_format: str, server: str | None, token_file: str | None
) -> None:
    """Print the whole report of a bisect: the answer, the explanation, the evidence, the commits."""
    if server is not None:
        return print_remote(server, token_file, bisect_id, "report", output_format)
    from bisector.runner.wiring import open_store

    with translated_errors(), open_store(db_url, read_only=True) as store:
        print_report(store, bisect_id, output_format)


TABLE_FORMATS = ("table", "json")


table_format_option = output_format_option(TABLE_FORMATS, "A table for people or JSON for tools.")


def filter_options(function: F) -> F:
    for decorator in reversed(
        [
            click.option("--repo", help="Only bisects of this repository (its path as stored)."),
            click.option(
                "--since", help="Only bisects created since: a date (2026-11-01), a datetime, or 7d, 12h, 4w."
            ),
        ]
    ):
        function = decorator(function)
    return function


@click.command(name="list")
@filter_options
@click.option("--status", help="Only bisects in this status (found, ambiguous, running, ...).")
@click.option("--metric", help="Only bisects whose metric name contains this text.")
@click.option("--culprit", help="Only bisects that blamed this commit (SHA prefix) or PR (#123).")
@click.option("--owner", help="Only bisects this person submitted to a `bisect serve` (their token's name).")
@click.option("--limit", type=int, default=20, show_default=True, help="How many bisects to show, newest first.")
@db_option
@table_format_option
def list_command(
    repo: str | None,
    since: str | None,
    status: str | None,
    metric: str | None,
    culprit: str | None,
    owner: str | None,
    limit: int,
    db_url: str | None,
    output_format: str,
) -> None:
    """List past and running bisects, newest first, filtered."""
    from bisector.report.history import find_bisects, parse_filter, summary_json
    from bisector.runner.wiring import open_store

    with translated_errors():
        where = parse_filter(repo, status, metric, culprit, since, owner=owner)
        with open_store(db_url, read_only=True) as store:
            summaries = find_bisects(store, where, limit)
    if output_format == "json":
        click.echo(json.dumps([summary_json(s) for s in summaries], indent=2))
        return
    if not summaries:
        click.echo("no bisects")
        return
    console = out_console()
    console.print(bisect_table(summaries, console.width))


REPO_WIDTH = 28  # the repo column's widest text: longer paths keep their last components


# Narrowest width of each column of `bisect list`: with the gaps of 2 between columns they add up to 80, so
# every cell stays readable at 80 columns ("endpoints_mismatch" folds into two halves of 9).
LIST_MIN_WIDTHS = {
    "id": 2,
    "status": 9,
    "created (UTC)": 10,
    "repo": 9,
    "metric": 6,
    "range": 12,
    "first bad": 12,
    "steps": 6,
    "owner": 5,  # shown when a listed bisect was submitted to a server: the table then needs 87 columns
}


COLUMN_GAP = 2


def short_repo(path: str, width: int = REPO_WIDTH) -> str:
    """The repository path as the list shows it: whole where it fits, else its last components after "…/"
    (the last component whole, however long)."""
    if len(path) <= width:
        return path
    parts = path.rstrip("/").split("/")
    shown = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(shown) + 2 > width:
            break
        shown = f"{part}/{shown}"
    return f"…/{shown}"


def column_widths(natural: dict[str, int], width: int) -> dict[str, int]:
    """Each column's width in a table `width` wide: its natural width, less where the row would not fit. The
    columns that fold cleanly go to their minimum first (whole: a status folds in halves or not at all); then
    characters are taken one at a time from the widest column still above its minimum (LIST_MIN_WIDTHS)."""
    widths = dict(natural)
    available = width - COLUMN_GAP * (len(widths) - 1)
    for column in CLEAN_FOLDS:
        if sum(widths.values()) > available:
            widths[column] = min(widths[column], LIST_MIN_WIDTHS[column])
    while sum(widths.values()) > available:
        shrinkable = [c for c in widths if widths[c] > LIST_MIN_WIDTHS[c]]
        if not shrinkable:
            break
        widths[max(shrinkable, key=lambda c: widths[c])] -= 1
    return widths


CLEAN_FOLDS = ("created (UTC)", "status")  # fold first: the date at its space, endpoints_mismatch into halves


def bisect_table(summaries: Sequence[BisectSummary], width: int) -> Table:
    """`bisect list`'s table, `width` columns wide (80 and up stay readable; 87 with the owner column, shown when
    a listed bisect has an owner): where the natural widths do not fit, the widest columns fold first, and none
    below its minimum."""
    from rich.table import Table

    from bisector.report.history import culprit_label

    rows = [
        [
            str(s.id),
            s.status_label,
            s.created.strftime("%Y-%m-%d %H:%M"),
            short_repo(s.repo),
            s.metric,
            f"{s.good[:10]}..{s.bad[:10]}",
            culprit_label(s),
            f"{s.steps} ({s.steps_running} running)" if s.steps_running else str(s.steps),
            s.owner or "-",
        ]
        for s in summaries
    ]
    columns = [c for c in LIST_MIN_WIDTHS if c != "owner" or any(s.owner for s in summaries)]
    natural = {c: max([len(c), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)}
    table = Table(box=None, pad_edge=False, header_style="bold underline")
    for column, column_width in column_widths(natural, width).items():
        table.add_column(column, overflow="fold", width=column_width, no_wrap=column == "id")
    for row in rows:
        table.add_row(*row[: len(columns)])
    return table


@click.command()
@click.argument("bisect_id", type=int)
@click.option(
    "--tail",
    type=click.IntRange(0, 200),
    default=5,
    show_default=True,
    help="Log lines shown per step (0: the report alone).",
)
@db_option
@table_format_option
def show(bisect_id: int, tail: int, db_url: str | None, output_format: str) -> None:
    """Show a bisect: its report, then every step with the tail of its log."""
    from rich.panel import Panel

    from bisector.report import BisectReport, print_text, report_json
    from bisector.report.history import log_tail
    from bisector.runner.wiring import open_store

    with translated_errors(), open_store(db_url, read_only=True) as store:
        report = BisectReport.load(store, bisect_id)
    if output_format == "json":
        data = report_json(report)
        for step in data["steps"]:  # type: ignore[attr-defined]
            step["log_tail"] = log_tail(Path(step["log_path"]), tail) if step["log_path"] else None
        click.echo(json.dumps(data, indent=2))
        return
    console = out_console()
    print_text(console, report)
    for step in report.steps if tail else ():
        text = log_tail(Path(step.log_path), tail) if step.log_path else None
        verdict = step.verdict.value if step.verdict else "running"
        title = f"step {report.number(step)}: {step.sha[:12]} {verdict}"  # numbered as `bisect report` does
        console.print(Panel(text or "(no log)", title=title, title_align="left", expand=False), soft_wrap=True)


@click.command()
@filter_options
@db_option
@table_format_option
def stats(repo: str | None, since: str | None, db_url: str | None, output_format: str) -> None:
    """Per repository and metric: bisects, time to culprit, GPU-hours (each step's time x the GPUs it held; a
    CPU-only step adds 0, as in the report), unclear results, frequent culprits."""
    from rich.table import Table

    from bisector.report.history import compute_stats, parse_filter
    from bisector.runner.wiring import open_store

    with translated_errors():
        where = parse_filter(repo=repo, since=since)
        with open_store(db_url, read_only=True) as store:
            result = compute_stats(store, where)
    if output_format == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    table = Table(title="bisects per repository and metric")
    columns = ("repo", "metric", "bisects", "found", "median to culprit", "GPU-hours", "unclear", "files", "tables")
    for column in (*columns, "PR authors"):
        table.add_column(column, overflow="fold")
    for g in result.groups:
        table.add_row(
            g.repo, g.metric, str(g.bisects), str(g.found),
            "-" if g.median_time_to_culprit_s is None else f"{g.median_time_to_culprit_s:.1f}s",
            f"{g.gpu_hours:.3g}", "-" if g.unclear_share is None else f"{g.unclear_share:.0%}",
            _counts(g.top_files), _counts(g.top_tables), _counts(g.top_authors),
        )  # fmt: skip
    out_console().print(table)


def _counts(pairs: list[tuple[str, int]]) -> str:
    return "\n".join(f"{name} ({count})" for name, count in pairs) or "-"


@click.command(name="log")
@click.argument("bisect_id", type=int)
@db_option
def log_command(bisect_id: int, db_url: str | None) -> None:
    """Print a bisect's verdicts as `git bisect log` does, so that `git bisect replay` accepts them."""
    from bisector.report import BisectReport, render_git_log
    from bisector.runner.wiring import open_store

    with translated_errors(), open_store(db_url, read_only=True) as store:
        click.echo(render_git_log(BisectReport.load(store, bisect_id)), nl=False)
