"""What every `bisect` command shares: the error translation, the common options, consoles, reports.

The command modules of this package import from here; `bisector/cli/__init__.py` assembles them.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console

from bisector.vocab.errors import BisectError

F = TypeVar("F", bound=Callable[..., Any])
FORMATS = ("text", "markdown", "json")
EXIT_NO_CULPRIT = 3
EXIT_PAUSED = 4  # the harness kept failing (disk full, broken slots): fix it and `bisect resume`
# A stop signal exits with 128 + its number (130 SIGINT, 143 SIGTERM, 129 SIGHUP), as shells report them.


class CLIError(click.ClickException):
    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"bisect: error: {self.format_message()}", err=True)


@contextmanager
def translated_errors() -> Iterator[None]:
    """Turn the project's errors into one line and exit code 2, never a traceback; an interrupt (Ctrl-C) into
    `bisect: interrupted` and exit 130. Commands that run steps catch their stop signals first
    (stoppable_by_signals), and say there how the bisect continues."""
    try:
        yield
    except BisectError as exc:
        raise CLIError(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("bisect: interrupted", err=True)
        sys.exit(128 + signal.SIGINT)


@contextmanager
def stoppable_by_signals() -> Iterator[None]:
    """For commands that run steps: SIGTERM, SIGINT or SIGHUP stop the bisect's tests, store its running steps
    as interrupted (the coordinator does), print one line and exit with 128 + the signal's number."""
    from bisector.runner.stopping import StopRequested, stop_on_signals

    try:
        with stop_on_signals():
            yield
    except StopRequested as stop:
        if stop.bisect_id is None:
            click.echo(f"bisect: stopped by {stop.signal_name}", err=True)
        else:
            click.echo(
                f"bisect {stop.bisect_id}: stopped by {stop.signal_name}; {stop.interrupted_steps} running step(s) "
                f"stored as interrupted; `bisect resume {stop.bisect_id}` continues",
                err=True,
            )
        sys.exit(stop.exit_code)


def db_option(function: F) -> F:
    return click.option(
        "--db",
        "db_url",
        envvar="BISECT_DB",
        default=None,
        help="The result store: a SQLite file path or a SQLAlchemy URL (default: $BISECT_DB, else bisect.db in the "
        "per-user data dir).",
    )(function)


def output_format_option(choices: Sequence[str], help_text: str) -> Callable[[F], F]:
    """A command's --format (its value: output_format): one of choices, the first by default."""
    return click.option(
        "--format",
        "output_format",
        type=click.Choice(choices),
        default=choices[0],
        show_default=True,
        help=help_text,
    )


format_option = output_format_option(FORMATS, "How to print the report.")


EXIT_BROKEN_PIPE = 141  # as a shell reports a command killed by SIGPIPE


class OutConsole(Console):
    """stdout's console: once its reader has gone (`bisect ... | head`), the command ends as a shell reports a
    command killed by SIGPIPE, where rich's own console would exit 1 (what was stored stays stored)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush fails nowhere
        raise SystemExit(EXIT_BROKEN_PIPE)


def out_console() -> Console:
    """stdout; reports piped to a file or a PR comment get a wide fixed width instead of 80 columns."""
    console = OutConsole(highlight=False)
    if console.is_terminal:
        return console
    from bisector.report.text import REPORT_WIDTH  # imported when the report prints, after the verdict

    return OutConsole(highlight=False, width=REPORT_WIDTH)


class ProgressConsole(Console):
    """stderr's console: once its reader has gone (`bisect start ... 2>&1 | head`), it goes quiet and the bisect
    goes on to its answer in the store, where rich's own console would exit at once and leave the bisect running."""

    def on_broken_pipe(self) -> None:
        self.quiet = True


def err_console() -> Console:
    return ProgressConsole(stderr=True, highlight=False, soft_wrap=True)


def observer() -> Any:
    from bisector.cli.live import LiveObserver

    return LiveObserver(err_console())


def print_report(store: Any, bisect_id: int, output_format: str) -> None:
    """`bisect report`: the terminal report, or as `bisect serve` renders it (Markdown, JSON)."""
    from bisector.report import BisectReport, print_text
    from bisector.report.rendered import render

    if output_format == "text":
        print_text(out_console(), BisectReport.load(store, bisect_id))
    else:
        click.echo(render(store, bisect_id, "report", output_format))


def print_status(store: Any, bisect_id: int, output_format: str) -> None:
    """`bisect status`: a few lines (text, Markdown) or the JSON report."""
    from bisector.report.rendered import render

    click.echo(render(store, bisect_id, "status", output_format))


def exit_for(status_value: str) -> None:
    if status_value == "paused":
        sys.exit(EXIT_PAUSED)
    if status_value != "found":
        sys.exit(EXIT_NO_CULPRIT)
