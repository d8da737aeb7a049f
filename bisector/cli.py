"""`bisect`: the command line. Each command parses, makes one core call, and translates errors.

Exit codes: 0 a first bad commit was found; 2 bad input (one line on stderr); 3 the bisect ended
without naming one commit (ambiguous, endpoints mismatch, failed, cancelled).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bisector.cli_options import START_OPTIONS, executor_overrides, option_values, spec_options
from bisector.cli_service import cancel_remote, print_remote, server_options
from bisector.cli_support import (
    EXIT_NO_CULPRIT,
    CLIError,
    db_option,
    err_console,
    exit_for,
    format_option,
    observer,
    out_console,
    print_report,
    print_status,
    stoppable_by_signals,
    translated_errors,
)
from bisector.options import EXECUTOR_OPTION_NAMES, ExecutorKind
from bisector.vocab.domain import Verdict, image_origin

if TYPE_CHECKING:
    from bisector.spec import BisectSpec

DEMO_MARKER = "gpu-bisect-demo"  # in .git/ of a demo repository: `demo` may overwrite it
DEMO_VERIFY_M = 4  # the demo's test verifies k=3 speculative tokens: m = k + 1 (kernels/demo.py)
EXIT_BROKEN_PIPE = 141  # as a shell reports a command killed by SIGPIPE


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="gpu-bisect")
def main() -> None:
    """Find the commit that caused a GPU regression, with parallel GPU workers and a stored history."""


@main.command()
@click.option("--repo", type=click.Path(file_okay=False), default=".", show_default=True, help="The git repository.")
@spec_options(*START_OPTIONS)
@click.option("--notify", "notify_url", help="POST the finished report (JSON with a Markdown body) to this webhook.")
@click.argument("paths", nargs=-1, metavar="[-- PATH...]")
@db_option
@format_option
def start(**params: Any) -> None:
    """Start a bisect between a good and a bad commit and run it to the end.

    After `--`, paths limit the search to the commits that touch them, as `git bisect start -- PATH...`."""
    record = _start_bisect(**params)
    exit_for(record.status.value)


def _start_bisect(db_url: str | None, output_format: str, **params: Any) -> Any:
    with stoppable_by_signals(), translated_errors():
        if params["notify_url"] is not None:  # imported only then: httpx and the triage code take ~0.1 s
            from bisector.notify import check_webhook_url

            check_webhook_url(params["notify_url"])
        spec = spec_from_params(**params)
        if spec.executor.kind is ExecutorKind.LOCAL:
            from bisector.workers.local_forkserver import boot

            boot()  # a process of its own: the workers' fork server boots while this one imports and lists the range
        from bisector.app import check_executor, make_coordinator, make_executor, open_store

        gc.freeze()  # what the imports made lives as long as the process: the bisect's collections need not walk it
        check_executor(spec)
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the report (Ray prints to it)
            executor = make_executor(spec)  # its workers boot while the store opens and the range is listed
        with executor, open_store(db_url) as store:
            with contextlib.redirect_stdout(sys.stderr):
                record = make_coordinator(store, observer()).start(spec, executor)
            print_report(store, record.id, output_format)
            if params["notify_url"] is not None:
                from bisector.cli_triage import notify_with_warning

                notify_with_warning(store, record.id, params["notify_url"])
    return record


def spec_from_params(repo: str, **params: Any) -> BisectSpec:
    """The BisectSpec of `bisect start`'s parsed options (also `bisect replay`'s): bisect.toml, then the flags."""
    from bisector.config import build_spec
    from bisector.vocab.gitrepo import GitRepo

    return build_spec(GitRepo(repo).root, option_values(params))


@main.command()
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
def resume(bisect_id: int, explain: bool | None, db_url: str | None, output_format: str, **executor_flags: Any) -> None:
    """Continue a bisect whose coordinator stopped, without re-running finished steps."""
    from bisector.app import make_coordinator, open_store

    overrides = executor_overrides(executor_flags)
    with stoppable_by_signals(), translated_errors(bisect_id), open_store(db_url) as store:
        with contextlib.redirect_stdout(sys.stderr):
            record = make_coordinator(store, observer()).resume(bisect_id, overrides, explain=explain)
        print_report(store, record.id, output_format)
    exit_for(record.status.value)


@main.command()
@click.argument("bisect_id", type=int)
@click.argument("rev", required=False)
@click.option(
    "--step", "step_number", type=int, metavar="N",
    help="Repeat stored step N (as `bisect report` numbers it): its commit, on its image, instead of REV.",
)  # fmt: skip
@click.option("--times", type=int, default=1, show_default=True, help="How many runs (on free workers in parallel).")
@spec_options(
    *(name for name in EXECUTOR_OPTION_NAMES if name != "build_ahead"),  # a rerun's commits are known: none ahead
    help={
        "executor": "Where to run (default: as the bisect).",
        "workers": "Runs at once.",
        "gpus_per_step": "GPUs each run gets.",
        "ray_address": "With --executor ray: the cluster to join.",
        "resources": "Ray resources per run.",
    },
)
@db_option
def rerun(
    bisect_id: int, rev: str | None, step_number: int | None, times: int, db_url: str | None, **executor_flags: Any
) -> None:
    """Run a bisect's build and test again at any commit, or repeat one of its steps (stored with the bisect,
    which is unchanged)."""
    from bisector.app import make_coordinator, open_store
    from bisector.report.model import BisectReport

    overrides = executor_overrides(executor_flags)
    with stoppable_by_signals(), translated_errors(bisect_id), open_store(db_url) as store:
        if (rev is None) == (step_number is None):
            raise CLIError("give REV or --step N (one of them)")
        if step_number is not None:
            rev = BisectReport.load(store, bisect_id).step(step_number).sha
        assert rev is not None
        with contextlib.redirect_stdout(sys.stderr):
            results = make_coordinator(store, observer()).rerun(bisect_id, rev, times, overrides)
        for result in results:
            metric = f"  metric {result.samples[-1]:g}" if result.samples else ""
            image = f"  image {result.image.id[:12]} ({image_origin(result.image.summary())})" if result.image else ""
            click.echo(
                f"{result.sha[:12]}  {result.verdict.value}{metric}  on {result.worker} "
                f"(GPUs {','.join(map(str, result.gpus)) or '-'}){image}  {result.run_s:.1f}s  log {result.log_path}"
            )
    if any(r.verdict not in (Verdict.GOOD, Verdict.BAD, Verdict.MEASURED) for r in results):
        sys.exit(EXIT_NO_CULPRIT)


@main.command()
@click.argument("bisect_id", type=int)
@db_option
@server_options
def cancel(bisect_id: int, db_url: str | None, server: str | None, token_file: str | None) -> None:
    """Cancel a running bisect; its coordinator stops its steps and exits."""
    if server is not None:
        return cancel_remote(server, token_file, bisect_id)
    from bisector.app import open_store
    from bisector.coordinator import store_missing_candidates
    from bisector.vocab.domain import BisectStatus
    from bisector.vocab.errors import StateError

    with translated_errors(bisect_id), open_store(db_url) as store:
        record = store.get_bisect(bisect_id)
        if record.status.is_terminal():
            raise StateError(f"bisect {bisect_id} is already {record.status.value}")
        store.set_status(bisect_id, BisectStatus.CANCELLED, message="cancelled by the operator")
        store_missing_candidates(store, record)  # its coordinator may have died before storing them
    click.echo(f"bisect {bisect_id}: cancelled")


@main.command()
@click.argument("bisect_id", type=int)
@db_option
@format_option
@server_options
def status(bisect_id: int, db_url: str | None, output_format: str, server: str | None, token_file: str | None) -> None:
    """Show in a few lines where a bisect stands: state, progress, owner, last steps (`bisect report`: all)."""
    if server is not None:
        return print_remote(server, token_file, bisect_id, "status", output_format)
    from bisector.app import open_store

    with translated_errors(bisect_id), open_store(db_url, read_only=True) as store:
        print_status(store, bisect_id, output_format)


@main.command(name="report")
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
    from bisector.app import open_store

    with translated_errors(bisect_id), open_store(db_url, read_only=True) as store:
        print_report(store, bisect_id, output_format)


@main.command()
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


@main.command()
@click.argument("bisect_id", type=int)
@db_option
@format_option
def minimize(bisect_id: int, db_url: str | None, output_format: str) -> None:
    """Find the smallest set of the culprit's changes (hunks, table entries) that still fails."""
    from bisector.app import make_coordinator, open_store

    with stoppable_by_signals(), translated_errors(bisect_id), open_store(db_url) as store:
        make_coordinator(store, observer()).minimize(bisect_id)
        print_report(store, bisect_id, output_format)


@main.group()
def demo() -> None:
    """The embedded demo: a kernel-stack history with a planted batch-variance regression."""


@demo.command("init")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--commits", type=int, default=200, show_default=True, help="Commits between good and bad.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the history (same seed, same SHAs).")
def demo_init(directory: str, commits: int, seed: int) -> None:
    """Write the demo repository and print its good and bad commits."""
    from bisector.kernels.demo import describe

    with translated_errors():
        repo = _make_demo(Path(directory), commits, seed)
    click.echo(describe(repo))
    click.echo(
        f"bisect start --repo {repo.path} --good {repo.good[:10]} --bad {repo.bad[:10]} "
        f"--run {shlex.quote(repo.run_cmd)} --metric {shlex.quote(repo.metric_regex)} "
        f"--expect {shlex.quote(repo.expect)}"
    )


@demo.command("run", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--dir", "directory", type=click.Path(file_okay=False), help="Where to write the demo repository.")
@click.option("--commits", type=int, default=200, show_default=True, help="Commits between good and bad.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the history.")
@click.option("--workers", type=int, default=1, show_default=True, help="Steps run at once.")
@format_option
@click.pass_context
def demo_run(
    ctx: click.Context, directory: str | None, commits: int, seed: int, workers: int, output_format: str
) -> None:
    """Write the demo repository and bisect it end to end; other `bisect start` options pass through."""
    from bisector.vocab.paths import data_dir

    with translated_errors():
        target = Path(directory) if directory else data_dir() / "demo" / f"seed{seed}-n{commits}"
        repo = _make_demo(target, commits, seed)
    err_console().print(
        f"demo: {repo.commits} commits in {repo.path}; the planted culprit is {repo.culprit[:12]} "
        f"({repo.culprit_subject})"
    )
    args = [
        "--repo", str(repo.path), "--good", repo.good, "--bad", repo.bad, "--run", repo.run_cmd,
        "--metric", repo.metric_regex, "--expect", repo.expect, "--workers", str(workers),
        "--format", output_format, *_demo_image_args(repo), *ctx.args,
    ]  # fmt: skip
    with start.make_context("bisect start", args, parent=ctx) as sub:
        record = _start_bisect(**sub.params)
    if record.first_bad != repo.culprit:
        err_console().print(f"demo: expected the planted culprit {repo.culprit[:12]}, the bisect ended {record.status}")
        sys.exit(EXIT_NO_CULPRIT)
    err_console().print(f"demo: the bisect named the planted culprit {repo.culprit[:12]}", style="green")


def _demo_image_args(repo: Any) -> list[str]:
    """Each commit's image built once by the demo's build step, where uv is there to make the images' venvs."""
    from bisector.workers.images.builder import uv_binary

    try:
        uv_binary()
    except OSError:
        err_console().print("demo: uv is not installed, so the steps build nothing and run in worktrees")
        return []
    inputs = [arg for path in repo.image_inputs for arg in ("--image-input", path)]
    return ["--image", "venv", "--build", repo.build_cmd, *inputs]


def _make_demo(directory: Path, commits: int, seed: int) -> Any:
    """(Re)create the demo repository; refuses to overwrite a directory that is not a demo repo."""
    import shutil

    from bisector.kernels.demo import DemoError, init_demo_repo
    from bisector.vocab.errors import InputError

    if directory.exists() and any(directory.iterdir()):
        if not (directory / ".git" / DEMO_MARKER).exists():
            raise InputError(f"{directory} exists and is not a gpu-bisect demo repository; choose another --dir")
        shutil.rmtree(directory)
    try:
        repo = init_demo_repo(directory, commits=commits, seed=seed)
    except DemoError as exc:
        raise InputError(str(exc)) from None
    (directory / ".git" / DEMO_MARKER).write_text(f"seed={seed} commits={commits}\n")
    return repo


from bisector import cli_dashboard  # noqa: E402  (registered after `main` is defined)
from bisector.cli_habits import HABIT_COMMANDS  # noqa: E402  (the commands of cli_habits.py)
from bisector.cli_images import images, run_at_command  # noqa: E402
from bisector.cli_logs import logs  # noqa: E402
from bisector.cli_service import serve, submit_command  # noqa: E402
from bisector.cli_triage import triage  # noqa: E402

for _command in (
    cli_dashboard.list_command,
    cli_dashboard.show,
    cli_dashboard.stats,
    cli_dashboard.dashboard,
    *HABIT_COMMANDS,
    images,
    logs,
    run_at_command,
    triage,
    serve,
    submit_command(start),
):
    main.add_command(_command)


def main_entry() -> None:
    try:
        main(prog_name="bisect")
    except BrokenPipeError:  # the reader of the output went (`bisect ... | head`); what was stored stays stored
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush fails nowhere
        sys.exit(EXIT_BROKEN_PIPE)
    finally:
        # Everything left lives until the process ends: the interpreter's last collection need not walk it.
        gc.freeze()


if __name__ == "__main__":
    main_entry()
