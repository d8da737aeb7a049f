"""A bisect's life: `bisect start`, `resume`, `cancel`, `replay` (from a `git bisect log`) and
`mark` (a verdict by hand). Each parses, makes one call into the library, and translates errors."""

from __future__ import annotations

import contextlib
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bisector.core.options import EXECUTOR_OPTION_NAMES, ExecutorKind

if TYPE_CHECKING:
    from bisector.core.spec import BisectSpec
from datetime import UTC, datetime

from bisector.cli.options import START_OPTIONS, executor_overrides, option_values, spec_options
from bisector.cli.service import cancel_remote, cancelled_line, mark_remote, resume_remote, server_options
from bisector.cli.support import (
    CLIError,
    db_option,
    err_console,
    exit_for,
    format_option,
    observer,
    print_report,
    stoppable_by_signals,
    translated_errors,
)


@click.command()
@click.option("--repo", type=click.Path(file_okay=False), default=".", show_default=True, help="The git repository.")
@spec_options(*START_OPTIONS)
@click.option("--notify", "notify_url", help="POST the finished report (JSON with a Markdown body) to this webhook.")
@click.argument("paths", nargs=-1, metavar="[-- PATH...]")
@db_option
@format_option
def start(**params: Any) -> None:
    """Start a bisect between a good and a bad commit and run it to the end.

    After `--`, paths limit the search to the commits that touch them, as `git bisect start -- PATH...`."""
    record = start_bisect(**params)
    exit_for(record.status.value)


def start_bisect(db_url: str | None, output_format: str, **params: Any) -> Any:
    with stoppable_by_signals(), translated_errors():
        if params["notify_url"] is not None:  # imported only then: httpx and the triage code take ~0.1 s
            from bisector.runner.notify import check_webhook_url

            check_webhook_url(params["notify_url"])
        spec = spec_from_params(**params)
        if spec.executor.kind is ExecutorKind.LOCAL:
            from bisector.workers.local_forkserver import boot

            boot()  # a process of its own: the workers' fork server boots while this one imports and lists the range
        from bisector.runner.wiring import check_executor, make_executor, open_store, run_bisect

        gc.freeze()  # what the imports made lives as long as the process: the bisect's collections need not walk it
        check_executor(spec)
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the report (Ray prints to it)
            executor = make_executor(spec)  # its workers boot while the store opens and the range is listed
        with executor, open_store(db_url) as store:
            record = run_bisect(store, spec, observer(), executor)
            print_report(store, record.id, output_format)
            if params["notify_url"] is not None:
                from bisector.cli.triage import notify_with_warning

                notify_with_warning(store, record.id, params["notify_url"])
    return record


def spec_from_params(repo: str, **params: Any) -> BisectSpec:
    """The BisectSpec of `bisect start`'s parsed options (also `bisect replay`'s): bisect.toml, then the flags."""
    from bisector.runner.config import build_spec
    from bisector.vocab.gitrepo import GitRepo

    return build_spec(GitRepo(repo).root, option_values(params))


@click.command()
@click.argument("bisect_id", type=int)
@spec_options(
    *EXECUTOR_OPTION_NAMES,
    help={
        "executor": "Move the rest to other workers.",
        "workers": "Steps run at once from now on.",
        "gpus_per_step": "GPUs each step gets from now on.",
        "ray_address": "With --executor ray: the cluster to join.",
        "resources": "Ray resources per step.",
    },
)
@click.option(
    "--explain/--no-explain", default=None,
    help="Explain a culprit found now or left unexplained.  [default: as the bisect was started]",
)  # fmt: skip
@db_option
@format_option
@server_options
def resume(
    bisect_id: int, explain: bool | None, db_url: str | None, output_format: str, server: str | None,
    token_file: str | None, **executor_flags: Any,
) -> None:  # fmt: skip
    """Continue a bisect whose coordinator stopped, without re-running finished steps. With --server, a bisect the
    server paused on a failing harness: the server runs it again (its workers, as submitted)."""
    from bisector.runner.wiring import make_coordinator, open_store

    overrides = executor_overrides(executor_flags)
    if server is not None:
        given = [f"--{name.replace('_', '-')}" for name in overrides] + (["--explain"] if explain is not None else [])
        if given:
            raise CLIError(f"{', '.join(given)}: with --server the server runs the bisect as it was submitted")
        return resume_remote(server, token_file, bisect_id)
    with stoppable_by_signals(), translated_errors(), open_store(db_url) as store:
        with contextlib.redirect_stdout(sys.stderr):
            record = make_coordinator(store, observer()).resume(bisect_id, overrides, explain=explain)
        print_report(store, record.id, output_format)
    exit_for(record.status.value)


@click.command()
@click.argument("bisect_id", type=int)
@click.option(
    "--wait", "wait_s", type=click.FloatRange(min=0), metavar="SECONDS",
    help="How long to wait for the reruns to stop; those still running then are named asked to stop.  "
    "[default: 60; with --server, at most what the server allows, said when less]",
)  # fmt: skip
@db_option
@server_options
def cancel(
    bisect_id: int, wait_s: float | None, db_url: str | None, server: str | None, token_file: str | None
) -> None:
    """Cancel a running bisect and its reruns (`run-at --bisect`): their coordinators stop their steps and exit. Of
    a bisect that has ended, its reruns alone. With --server, the server's bisect and its reruns, the server's and
    those on the server's store."""
    if server is not None:
        return cancel_remote(server, token_file, bisect_id, wait_s)
    from bisector.runner.coordinator import cancel_bisect
    from bisector.runner.wiring import open_store

    with translated_errors(), open_store(db_url) as store:
        outcome = cancel_bisect(store, bisect_id) if wait_s is None else cancel_bisect(store, bisect_id, wait_s=wait_s)
    click.echo(cancelled_line(bisect_id, outcome.status.value, outcome.ended_before, outcome.reruns, outcome.asked))


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("log_file", type=click.Path(dir_okay=False))
@click.pass_context
def replay(ctx: click.Context, log_file: str) -> None:
    """Start a bisect from a `git bisect log` FILE: its verdicts are stored as manual steps, the search tests
    the rest. Any `bisect start` option may follow (--run is needed; --good/--bad, terms and paths default to
    the log's)."""
    from bisector.report import read_git_log
    from bisector.runner.manual import endpoints_from_log

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
    from bisector.runner.coordinator import prepare_bisect
    from bisector.runner.manual import store_log_marks
    from bisector.runner.wiring import check_executor, make_coordinator, open_store
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
            with translated_errors(), contextlib.redirect_stdout(sys.stderr):
                record = make_coordinator(store, observer()).run(bisect_id)
            print_report(store, record.id, output_format)
    return record


@click.command()
@click.argument("bisect_id", type=int)
@click.argument("rev")
@click.argument("verdict", metavar="TERM")
@click.option("--note", default="", help="Why: what you saw (shown in the report beside your verdict).")
@click.option(
    "--by", "who", default="", help="Who gives the verdict.  [default: the current user; with --server: the token's]"
)
@db_option
@server_options
def mark(
    bisect_id: int, rev: str, verdict: str, note: str, who: str, db_url: str | None, server: str | None,
    token_file: str | None,
) -> None:  # fmt: skip
    """Give a commit of a bisect your verdict by hand: TERM is good, bad (or the bisect's terms) or skip.

    A running bisect takes it in at once, a paused one at `bisect resume`. A finished one is re-judged: if the
    verdict changes the answer, the bisect is reopened for `bisect resume` (on a server, its job is queued again)."""
    if server is not None:
        if who:
            raise CLIError("--by: with --server the verdict is given by the token's person")
        return mark_remote(server, token_file, bisect_id, rev, verdict, note)
    from bisector.runner.manual import mark_commit
    from bisector.runner.wiring import open_store

    with translated_errors(), open_store(db_url) as store:
        outcome = mark_commit(store, bisect_id, rev, verdict, note=note, who=who)
    click.echo(
        f"bisect {bisect_id}: {outcome.commit.sha[:12]} marked {verdict} (step {outcome.number}); {outcome.message}"
    )
