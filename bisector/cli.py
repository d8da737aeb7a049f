"""`bisect`: the command line. Each command parses, makes one core call, and translates errors.

Exit codes: 0 a first bad commit was found; 2 bad input (one line on stderr); 3 the bisect ended
without naming one commit (ambiguous, endpoints mismatch, failed, cancelled).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

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
from vocab.domain import Verdict

if TYPE_CHECKING:
    from bisector.spec import BisectSpec

DEMO_MARKER = "gpu-bisect-demo"  # in .git/ of a demo repository: `demo` may overwrite it
DEMO_VERIFY_M = 4  # the demo's test verifies k=3 speculative tokens: m = k + 1 (kernels/demo.py)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="gpu-bisect")
def main() -> None:
    """Find the commit that caused a GPU regression, with parallel GPU workers and a stored history."""


def _env_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    from bisector.spec import ENV_NAME

    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_NAME.fullmatch(key):
            raise CLIError(f"--env {pair!r}: write KEY=VALUE, KEY of letters, digits and _")
        env[key] = value
    return env


def _resource_pairs(pairs: tuple[str, ...]) -> dict[str, float]:
    resources = {}
    for pair in pairs:
        name, sep, amount = pair.partition("=")
        try:
            resources[name] = float(amount)
        except ValueError:
            raise CLIError(f"--resources {pair!r}: write NAME=AMOUNT, e.g. H200=1") from None
        if not sep or not name or resources[name] <= 0:
            raise CLIError(f"--resources {pair!r}: write NAME=AMOUNT with a positive amount, e.g. H200=1")
    return resources


@main.command()
@click.option("--good", help="A commit where the test passes (SHA, branch, tag).")
@click.option("--bad", help="A later commit where it fails.")
@click.option("--repo", type=click.Path(file_okay=False), default=".", show_default=True, help="The git repository.")
@click.option("--run", "run_cmd", help="Shell command that tests a commit, run by bash at the worktree's root.")
@click.option("--build", "build_cmd", help="Shell command run before --run; a failing build skips the commit.")
@click.option("--metric", help="Regex with one group that captures the metric from the run's output.")
@click.option("--metric-json", help="FILE:KEY: read the metric from a JSON file the run writes (KEY may be a.b.0).")
@click.option(
    "--expect",
    help="What a good metric looks like, e.g. '>= 4.0' (higher is better) or '< 51.0'; 'auto' compares each "
    "commit's samples with the endpoints' (needs --direction).",
)
@click.option(
    "--no-metric",
    type=click.Choice(["skip", "bad"]),
    default=None,
    help="A run that prints no metric is skipped (default) or bad (the crash is the regression).",
)
@click.option("--workers", type=int, help="Steps run at once (one GPU slot each).  [default: 1]")
@click.option("--gpus-per-step", type=int, help="GPUs each step gets (CUDA_VISIBLE_DEVICES).  [default: 1 if any]")
@click.option("--timeout", type=float, help="Seconds a step (build + run) may take before it is killed.")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="Environment for build and run (repeatable).")
@click.option(
    "--all-parents",
    is_flag=True,
    default=None,
    help="Descend into a bad merge to find the commit inside the branch it merged.",
)
@click.option("--max-attempts", type=int, help="Tries per commit when infrastructure errors happen.  [default: 3]")
@click.option("--repeat", type=int, help="Runs per probed commit (noisy metrics, flaky tests).  [default: 1]")
@click.option("--max-repeat", type=int, help="More runs, doubling, while a commit's verdict is uncertain.")
@click.option("--noise-band", type=float, help="Metric values this close to the threshold are uncertain.")
@click.option("--direction", type=click.Choice(["higher", "lower"]), help="Which way the metric is better.")
@click.option("--find-fix", is_flag=True, default=None, help="Find the commit that fixed the metric instead.")
@click.option("--strategy", type=click.Choice(["kary", "noisy"]), help="Search: k-ary, or noisy (posterior).")
@click.option(
    "--confirm/--no-confirm",
    default=None,
    help="Re-run the first bad commit against its parent at the end.  [default: with repeats or flakes]",
)
@click.option(
    "--verify-endpoints",
    type=click.Choice(["first", "lazy"]),
    help="Run both endpoints first, or only when the answer depends on one.  [default: lazy at --workers 1]",
)
@click.option("--infra-pattern", "infra_patterns", multiple=True, help="Extra regex of an infrastructure failure.")
@click.option(
    "--executor",
    type=click.Choice(["local", "ray", "inprocess"]),
    default=None,
    help="Where steps run: worker processes on this host (default) or a Ray cluster.",
)
@click.option(
    "--ray-address",
    envvar="RAY_ADDRESS",
    help="With --executor ray: the cluster to join (default: $RAY_ADDRESS, else start a local one).",
)
@click.option(
    "--resources",
    "resource_pairs",
    multiple=True,
    metavar="NAME=AMOUNT",
    help="With --executor ray: a custom resource each step needs, e.g. H200=1 (repeatable).",
)
@click.option(
    "--explain/--no-explain",
    default=None,
    help="After a culprit is found: diff its dispatch tables and re-run both sides traced.  [default: on]",
)
@click.option("--trace-kernels", is_flag=True, default=None, help="The traced re-runs also record GPU kernels.")
@click.option("--minimize", is_flag=True, default=None, help="After a culprit is found: find its smallest bad change.")
@click.option("--image", type=click.Choice(["none", "venv"]), help="venv: build each commit's image once, reuse it.")
@click.option("--image-input", "image_inputs", multiple=True, help="A path whose tree keys the image (repeatable).")
@click.option("--images-max-size", help="LRU cap of this node's image cache, e.g. 20G.  [default: 20G]")
@click.option("--notify", "notify_url", help="POST the finished report (JSON with a Markdown body) to this webhook.")
@click.option("--term-old", help="The word for the good endpoint's state, e.g. fast (as git bisect --term-old).")
@click.option("--term-new", help="The word for the bad endpoint's state, e.g. slow (as git bisect --term-new).")
@click.argument("paths", nargs=-1, metavar="[-- PATH...]")
@db_option
@format_option
def start(**params: Any) -> None:
    """Start a bisect between a good and a bad commit and run it to the end.

    After `--`, paths limit the search to the commits that touch them, as `git bisect start -- PATH...`."""
    record = _start_bisect(**params)
    exit_for(record.status.value)


def _start_bisect(db_url: str | None, output_format: str, **params: Any) -> Any:
    from bisector.app import check_executor, make_coordinator, make_executor, open_store
    from bisector.cli_triage import notify_with_warning
    from bisector.notify import check_webhook_url

    with stoppable_by_signals(), translated_errors():
        if params["notify_url"] is not None:
            check_webhook_url(params["notify_url"])
        spec = spec_from_params(**params)
        check_executor(spec)
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the report (Ray prints to it)
            executor = make_executor(spec)  # its workers boot while the store opens and the range is listed
        with executor, open_store(db_url) as store:
            with contextlib.redirect_stdout(sys.stderr):
                record = make_coordinator(store, observer()).start(spec, executor)
            print_report(store, record.id, output_format)
            if params["notify_url"] is not None:
                notify_with_warning(store, record.id, params["notify_url"])
    return record


def spec_from_params(
    repo: str, env_pairs: tuple[str, ...], infra_patterns: tuple[str, ...], paths: tuple[str, ...], **flags: Any
) -> BisectSpec:
    """The BisectSpec of `bisect start`'s parsed options (also `bisect replay`'s)."""
    from bisector.spec import build_spec
    from vocab.gitrepo import GitRepo

    root = GitRepo(repo).root
    values = {
        "good": flags["good"],
        "bad": flags["bad"],
        "run": flags["run_cmd"],
        "build": flags["build_cmd"],
        "metric": flags["metric"],
        "metric_json": flags["metric_json"],
        "expect": flags["expect"],
        "no_metric": flags["no_metric"],
        "workers": flags["workers"],
        "gpus_per_step": flags["gpus_per_step"],
        "timeout": flags["timeout"],
        "env": _env_pairs(env_pairs),
        "all_parents": flags["all_parents"],
        "max_attempts": flags["max_attempts"],
        "repeat": flags["repeat"],
        "max_repeat": flags["max_repeat"],
        "noise_band": flags["noise_band"],
        "direction": flags["direction"],
        "find_fix": flags["find_fix"],
        "strategy": flags["strategy"],
        "confirm": flags["confirm"],
        "verify_endpoints": flags["verify_endpoints"],
        "infra_patterns": infra_patterns,
        "executor": flags["executor"],
        "ray_address": flags["ray_address"],
        "resources": _resource_pairs(flags["resource_pairs"]),
        "explain": flags["explain"],
        "trace_kernels": flags["trace_kernels"],
        "minimize": flags["minimize"],
        "term_old": flags["term_old"],
        "term_new": flags["term_new"],
        "paths": tuple(paths),
        "image": flags.get("image"),
        "image_inputs": tuple(flags.get("image_inputs") or ()) or None,
        "images_max_size": flags.get("images_max_size"),
    }
    return build_spec(root, values)


@main.command()
@click.argument("bisect_id", type=int)
@click.option("--executor", type=click.Choice(["local", "ray", "inprocess"]), help="Move the rest to other workers.")
@click.option("--workers", type=int, help="Steps run at once from now on.")
@click.option("--gpus-per-step", type=int, help="GPUs each step gets from now on.")
@click.option("--ray-address", envvar="RAY_ADDRESS", help="With --executor ray: the cluster to join.")
@click.option("--resources", "resource_pairs", multiple=True, metavar="NAME=AMOUNT", help="Ray resources per step.")
@db_option
@format_option
def resume(bisect_id: int, db_url: str | None, output_format: str, **executor_flags: Any) -> None:
    """Continue a bisect whose coordinator stopped, without re-running finished steps."""
    from bisector.app import make_coordinator, open_store

    overrides = _executor_overrides(executor_flags)
    with stoppable_by_signals(), translated_errors(bisect_id), open_store(db_url) as store:
        with contextlib.redirect_stdout(sys.stderr):
            record = make_coordinator(store, observer()).resume(bisect_id, overrides)
        print_report(store, record.id, output_format)
    exit_for(record.status.value)


@main.command()
@click.argument("bisect_id", type=int)
@click.argument("rev")
@click.option("--times", type=int, default=1, show_default=True, help="How many runs (on free workers in parallel).")
@click.option(
    "--executor", type=click.Choice(["local", "ray", "inprocess"]), help="Where to run (default: as the bisect)."
)
@click.option("--workers", type=int, help="Runs at once.")
@click.option("--gpus-per-step", type=int, help="GPUs each run gets.")
@click.option("--ray-address", envvar="RAY_ADDRESS", help="With --executor ray: the cluster to join.")
@click.option("--resources", "resource_pairs", multiple=True, metavar="NAME=AMOUNT", help="Ray resources per run.")
@db_option
def rerun(bisect_id: int, rev: str, times: int, db_url: str | None, **executor_flags: Any) -> None:
    """Run a bisect's build and test again at any commit (stored with the bisect, which is unchanged)."""
    from bisector.app import make_coordinator, open_store

    overrides = _executor_overrides(executor_flags)
    with stoppable_by_signals(), translated_errors(bisect_id), open_store(db_url) as store:
        with contextlib.redirect_stdout(sys.stderr):
            results = make_coordinator(store, observer()).rerun(bisect_id, rev, times, overrides)
        for result in results:
            metric = f"  metric {result.samples[-1]:g}" if result.samples else ""
            click.echo(
                f"{result.sha[:12]}  {result.verdict.value}{metric}  on {result.worker} "
                f"(GPUs {','.join(map(str, result.gpus)) or '-'})  {result.run_s:.1f}s  log {result.log_path}"
            )
    if any(r.verdict not in (Verdict.GOOD, Verdict.BAD, Verdict.MEASURED) for r in results):
        sys.exit(EXIT_NO_CULPRIT)


def _executor_overrides(executor_flags: dict[str, Any]) -> dict[str, Any]:
    overrides = {key: value for key, value in executor_flags.items() if value is not None}
    if "resource_pairs" in overrides:
        resources = _resource_pairs(overrides.pop("resource_pairs"))
        if resources:
            overrides["resources"] = resources
    return overrides


@main.command()
@click.argument("bisect_id", type=int)
@db_option
def cancel(bisect_id: int, db_url: str | None) -> None:
    """Cancel a running bisect; its coordinator stops its steps and exits."""
    from bisector.app import open_store
    from bisector.coordinator import store_missing_candidates
    from vocab.domain import BisectStatus
    from vocab.errors import StateError

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
def status(bisect_id: int, db_url: str | None, output_format: str) -> None:
    """Show in a few lines where a bisect stands: state, progress, owner, last steps (`bisect report`: all)."""
    from bisector.app import open_store

    with translated_errors(bisect_id), open_store(db_url, read_only=True) as store:
        print_status(store, bisect_id, output_format)


@main.command(name="report")
@click.argument("bisect_id", type=int)
@db_option
@format_option
def report_command(bisect_id: int, db_url: str | None, output_format: str) -> None:
    """Print the whole report of a bisect: the answer, the explanation, the evidence, the commits."""
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
    from kernels.demo import describe

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
    from vocab.paths import data_dir

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
        "--format", output_format, *ctx.args,
    ]  # fmt: skip
    with start.make_context("bisect start", args, parent=ctx) as sub:
        record = _start_bisect(**sub.params)
    if record.first_bad != repo.culprit:
        err_console().print(f"demo: expected the planted culprit {repo.culprit[:12]}, the bisect ended {record.status}")
        sys.exit(EXIT_NO_CULPRIT)
    err_console().print(f"demo: the bisect named the planted culprit {repo.culprit[:12]}", style="green")


def _make_demo(directory: Path, commits: int, seed: int) -> Any:
    """(Re)create the demo repository; refuses to overwrite a directory that is not a demo repo."""
    import shutil

    from kernels.demo import DemoError, init_demo_repo
    from vocab.errors import InputError

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
from bisector.cli_triage import triage  # noqa: E402

for _command in (
    cli_dashboard.list_command,
    cli_dashboard.show,
    cli_dashboard.stats,
    cli_dashboard.dashboard,
    *HABIT_COMMANDS,
    images,
    run_at_command,
    triage,
):
    main.add_command(_command)


def main_entry() -> None:
    main(prog_name="bisect")


if __name__ == "__main__":
    main_entry()
