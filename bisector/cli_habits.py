"""The habits of `git bisect`: `bisect log`, `replay`, `mark`, `worktrees ls|prune`, and the man page.

Each command parses, makes one core call (bisector/manual.py, bisector/report/, bisector/worktrees.py), and
translates errors. `bisect.cli` registers them with `main.add_command`.
"""

from __future__ import annotations

import contextlib
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from bisector.cli_support import (
    db_option,
    err_console,
    exit_for,
    observer,
    print_report,
    stoppable_by_signals,
    translated_errors,
)


@click.command(name="log")
@click.argument("bisect_id", type=int)
@db_option
def log_command(bisect_id: int, db_url: str | None) -> None:
    """Print a bisect's verdicts as `git bisect log` does, so that `git bisect replay` accepts them."""
    from bisector.app import open_store
    from bisector.report import BisectReport, render_git_log

    with translated_errors(bisect_id), open_store(db_url, read_only=True) as store:
        click.echo(render_git_log(BisectReport.load(store, bisect_id)), nl=False)


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("log_file", type=click.Path(dir_okay=False))
@click.pass_context
def replay(ctx: click.Context, log_file: str) -> None:
    """Start a bisect from a `git bisect log` FILE: its verdicts are stored as manual steps, the search tests
    the rest. Any `bisect start` option may follow (--run is needed; --good/--bad, terms and paths default to
    the log's)."""
    from bisector.cli import spec_from_params, start
    from bisector.manual import endpoints_from_log
    from bisector.report import read_git_log

    with translated_errors():
        log = read_git_log(log_file)
    good, bad = endpoints_from_log(log)
    extra = list(ctx.args)
    defaults = [("--good", good), ("--bad", bad), ("--term-old", log.term_old), ("--term-new", log.term_new)]
    args = [item for flag, value in defaults if value and flag not in extra for item in (flag, value)]
    if log.paths and "--" not in extra:
        extra += ["--", *log.paths]
    with start.make_context("bisect replay", [*args, *extra], parent=ctx) as sub:
        params = dict(sub.params)
    db_url, output_format = params.pop("db_url"), params.pop("output_format")
    record = _replay(log, log_file, params, db_url, output_format, spec_from_params)
    exit_for(record.status.value)


def _replay(
    log: Any, source: str, params: dict[str, Any], db_url: str | None, output_format: str, make_spec: Any
) -> Any:
    from bisector.app import check_executor, make_coordinator, open_store
    from bisector.coordinator import prepare_bisect
    from bisector.manual import store_log_marks
    from bisector.vocab.domain import BisectStatus
    from bisector.vocab.errors import BisectError
    from bisector.vocab.gitrepo import GitRepo

    with stoppable_by_signals(), translated_errors():
        spec = make_spec(**params)
        check_executor(spec)
        repo = GitRepo(spec.repo)
        for logged in log.marks:  # every revision the log names resolves before anything is stored
            repo.resolve(logged.rev)
        with open_store(db_url) as store:
            bisect_id = prepare_bisect(store, spec)
            try:
                warnings = store_log_marks(store, bisect_id, log, Path(source).name)
            except BisectError as exc:  # the bisect is stored: it ends with the reason, never left running
                store.set_status(bisect_id, BisectStatus.FAILED, finished=datetime.now(UTC), message=f"replay: {exc}")
                raise
            for warning in warnings:
                err_console().print(f"replay: {warning}")
            with translated_errors(bisect_id), contextlib.redirect_stdout(sys.stderr):
                record = make_coordinator(store, observer()).run(bisect_id)
            print_report(store, record.id, output_format)
    return record


@click.command()
@click.argument("bisect_id", type=int)
@click.argument("rev")
@click.argument("verdict", metavar="TERM")
@click.option("--note", default="", help="Why: what you saw (shown in the report beside your verdict).")
@click.option("--by", "who", default="", help="Who gives the verdict.  [default: the current user]")
@db_option
def mark(bisect_id: int, rev: str, verdict: str, note: str, who: str, db_url: str | None) -> None:
    """Give a commit of a bisect your verdict by hand: TERM is good, bad (or the bisect's terms) or skip.

    A running bisect takes it in at once. A finished one is re-judged: if the verdict changes the answer, the
    bisect is reopened for `bisect resume`."""
    from bisector.app import open_store
    from bisector.manual import mark_commit

    with translated_errors(bisect_id), open_store(db_url) as store:
        outcome = mark_commit(store, bisect_id, rev, verdict, note=note, who=who)
    click.echo(
        f"bisect {bisect_id}: {outcome.commit.sha[:12]} marked {verdict} (step {outcome.step_id}); {outcome.message}"
    )


@click.group()
def worktrees() -> None:
    """The worktrees gpu-bisect keeps for its workers (one per repository and worker slot)."""


_repo_option = click.option(
    "--repo", type=click.Path(file_okay=False), default=None, help="Only this repository's worktrees (default: all)."
)


@worktrees.command(name="ls")
@_repo_option
def worktrees_ls(repo: str | None) -> None:
    """List the worktrees: path, repository, checked-out commit, size, whether a worker uses it now."""
    from bisector.worktrees import list_worktrees

    with translated_errors():
        found = list_worktrees(repo)
    for info in found:
        state = "in use" if info.in_use else "idle"
        owner = str(info.repo) if info.repo else "(repository gone)"
        click.echo(f"{info.path}  {state}  {info.head[:12] or '-'}  {info.size_bytes / 1e6:.1f} MB  {owner}")
    if not found:
        click.echo("no worktrees")


@worktrees.command(name="prune")
@_repo_option
def worktrees_prune(repo: str | None) -> None:
    """Remove the worktrees no worker uses now (they are made again when needed)."""
    from bisector.worktrees import prune_worktrees

    with translated_errors():
        removed, kept = prune_worktrees(repo)
    freed = sum(info.size_bytes for info in removed) / 1e6
    click.echo(f"removed {len(removed)} worktree(s), {freed:.1f} MB; {len(kept)} in use kept")


@click.command(name="man")
@click.option("--output", type=click.Path(dir_okay=False), help="Write the page to this file instead of stdout.")
@click.pass_context
def man_command(ctx: click.Context, output: str | None) -> None:
    """Print the man page bisect(1), generated from these commands (e.g. `bisect man | man -l -`)."""
    from importlib.metadata import PackageNotFoundError, version

    from bisector.manpage import render_man

    root = ctx.find_root().command
    assert isinstance(root, click.Group)
    try:
        current = version("gpu-bisect")
    except PackageNotFoundError:
        current = "dev"
    page = render_man(root, current)
    if output:
        Path(output).write_text(page)
    else:
        click.echo(page, nl=False)


HABIT_COMMANDS = (log_command, replay, mark, worktrees, man_command)
