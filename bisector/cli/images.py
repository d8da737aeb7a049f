"""`bisect images ls|rm|prune` and `bisect run-at`: worker images and ad hoc runs on them."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import click

from bisector.cli.options import executor_overrides, option_values, spec_options
from bisector.cli.service import rerun_remote, server_options
from bisector.cli.support import (
    EXIT_NO_CULPRIT,
    CLIError,
    db_option,
    err_console,
    observer,
    out_console,
    output_format_option,
    stoppable_by_signals,
    translated_errors,
)
from bisector.core.options import EXECUTOR_OPTION_NAMES
from bisector.vocab.domain import Verdict, image_origin


@click.group()
def images() -> None:
    """Worker images: the built state of a commit, made once per node and reused by every step at it."""


@images.command(name="ls")
@output_format_option(
    ("text", "json"), "A table, or a JSON list (id, sha, source, size, build_s, last_used, status, node, path)."
)
@db_option
def images_ls(output_format: str, db_url: str | None) -> None:
    """List the images the store knows of, most recently used first."""
    from bisector.runner.image_admin import list_images
    from bisector.runner.wiring import open_store
    from bisector.workers.images.cache import ImageCache

    with translated_errors(), open_store(db_url) as store:
        found = list_images(store, ImageCache())
    if output_format == "json":
        rows = [
            {
                "id": i.id, "sha": i.sha, "source": i.source, "size": i.size_bytes, "build_s": round(i.build_s, 3),
                "last_used": i.last_used, "status": i.status, "node": i.node, "path": i.path,
            }
            for i in found
        ]  # fmt: skip
        click.echo(json.dumps(rows, indent=2))
        return
    if not found:
        click.echo("no images")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold underline")
    for column in ("id", "commit", "status", "source", "size", "build", "last used (UTC)", "node"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("size", "build") else "left")
    for i in found:
        size, build = f"{i.size_bytes / (1 << 20):.1f} MiB", f"{i.build_s:.1f}s"
        table.add_row(i.id, i.sha[:12], i.status, i.source, size, build, i.last_used[:19], i.node)
    out_console().print(table)


@images.command(name="rm")
@click.argument("image_ids", nargs=-1, required=True)
@db_option
def images_rm(image_ids: tuple[str, ...], db_url: str | None) -> None:
    """Remove images of this node (a failed one is built again by the next step that wants it)."""
    from bisector.runner.image_admin import remove_images
    from bisector.runner.wiring import open_store
    from bisector.workers.images.cache import ImageCache

    with translated_errors(), open_store(db_url) as store:
        for image_id in remove_images(store, ImageCache(), list(image_ids)):
            click.echo(f"removed {image_id}")


@images.command(name="prune")
@click.option("--older-than", help="Remove images unused for longer than this (7d, 12h, 30m).")
@click.option("--max-size", help="Remove least recently used images until this node holds at most this (10G).")
@db_option
def images_prune(older_than: str | None, max_size: str | None, db_url: str | None) -> None:
    """Remove images not in use: the least recently used over --max-size, and those older than --older-than; also
    the venv templates unused for a day and the drafts of killed builds."""
    from bisector.runner.image_admin import prune_images, prune_limits
    from bisector.runner.wiring import open_store
    from bisector.workers.images.cache import ImageCache

    with translated_errors():
        max_bytes, older_than_s = prune_limits(max_size, older_than)
        with open_store(db_url) as store:
            removed = prune_images(store, ImageCache(), max_bytes, older_than_s)
    click.echo(f"removed {len(removed)} image(s){': ' + ' '.join(removed) if removed else ''}")


# what `run-at --bisect` may change of the bisect's own run: where it runs (a rerun's commits are known: nothing is
# built ahead) and how many times
RERUN_FLAGS = (frozenset(EXECUTOR_OPTION_NAMES) - {"build_ahead"}) | {"repeat"}


@click.command(name="run-at")
@click.argument("rev", required=False)
@click.option("--repo", type=click.Path(file_okay=False), default=None, help="The git repository.  [default: .]")
@click.option(
    "--bisect", "bisect_id", type=int, metavar="ID",
    help="Run bisect ID's own build and test at REV, stored with it (the bisect stays as it is).",
)  # fmt: skip
@click.option(
    "--step", "step_number", type=int, metavar="N",
    help="With --bisect: repeat its stored step N (as `bisect report` numbers it), on its image, instead of REV.",
)  # fmt: skip
@spec_options(
    "build", "run", "metric", "expect", "repeat", "cherry_pick", "patch", "gpus_per_step", "executor", "workers",
    "ray_address", "resources", "image", "artifact", "image_template",
    help={
        "build": "Build command (default: bisect.toml's); run once per image.",
        "run": "Shell command to run at the commit (default: bisect.toml's).",
        "expect": "What a good metric is, e.g. '>= 4.0' (default: bisect.toml's).",
        "repeat": "How many runs (with --bisect: on free workers in parallel).  [default: 1]",
        "gpus_per_step": "GPUs each run gets (0: none, on any host).",
        "executor": "Where to run.  [default: local; with --bisect: as the bisect]",
        "workers": "With --bisect: runs at once.",
        "ray_address": "With --executor ray: the cluster to join (default: a local one).",
        "resources": "Ray resources per run.",
        "image": "Run on the commit's image.  [default: venv]",
    },
    aliases={"gpus_per_step": ("--gpus",)},
)  # fmt: skip
@output_format_option(("text", "json"), "A line per run, or JSON (sha, verdict, metric, image, runs).")
@db_option
@server_options
def run_at_command(
    rev: str | None,
    repo: str | None,
    bisect_id: int | None,
    step_number: int | None,
    output_format: str,
    db_url: str | None,
    server: str | None,
    token_file: str | None,
    **flags: Any,
) -> None:
    """Run any command at any commit on its image (built once, reused after) and store the run; with --bisect,
    that bisect's build and test again at any commit, or one of its steps repeated (with --server: on that server,
    once, in the background)."""
    from bisector.runner.config import build_spec, load_config_file
    from bisector.runner.run_at import adhoc_spec, decided, run_at
    from bisector.runner.wiring import check_executor, make_executor, open_store
    from bisector.vocab.gitrepo import GitRepo

    if server is not None:
        given = set(option_values(flags)) | ({"repo"} if repo is not None else set())
        if bisect_id is None or given:
            raise CLIError("with --server, run-at takes --bisect ID and REV or --step N: the server runs it once")
        rerun_remote(server, token_file, bisect_id, rev, step_number)
        return
    if bisect_id is not None:
        given = set(option_values(flags)) | ({"repo"} if repo is not None else set())
        if given - RERUN_FLAGS:
            wrong = ", ".join(f"--{name.replace('_', '-')}" for name in sorted(given - RERUN_FLAGS))
            raise CLIError(f"{wrong}: with --bisect the run is that bisect's own build and test")
        rerun_bisect(bisect_id, rev, step_number, flags, output_format, db_url)
        return
    if step_number is not None:
        raise CLIError("--step N needs --bisect ID (the bisect whose step it is)")
    if rev is None:
        raise CLIError("give REV, the commit to run at")
    if flags.get("workers") is not None:
        raise CLIError("--workers needs --bisect (an ad hoc run's repeats run one after another)")
    with stoppable_by_signals(), translated_errors():
        git_repo = GitRepo(repo or ".")
        sha = git_repo.resolve(rev)
        values = {**option_values(flags), "good": sha, "bad": sha}
        config = load_config_file(git_repo.root)
        if not {"image", "image_template"} & {*values, *config}:  # a container image or else a venv image
            values["image"] = "venv"
        spec = adhoc_spec(build_spec(git_repo.root, values))
        check_executor(spec)
        with open_store(db_url) as store, contextlib.redirect_stdout(sys.stderr):
            run = run_at(store, spec, sha, make_executor)
    if output_format == "json":
        click.echo(json.dumps(run.to_json(), indent=2))
    else:
        _print_run(run.to_json())
    if not decided(run.verdict):
        sys.exit(EXIT_NO_CULPRIT)


def _print_run(data: dict[str, Any]) -> None:
    image = data["image"]
    if image is None:
        where = "no image"
    elif image["source"] == "missing":
        where = "no image (none found, and no Containerfile at the commit to build it)"
    elif image["status"] == "failed":
        log = next(run["log"] for run in data["runs"] if run["image"] and run["image"]["status"] == "failed")
        when = f"after {image['build_s']:.1f}s" if image["source"] == "built" else "in an earlier run (cached)"
        where = f"image {image['id']}, whose build failed {when} (its output: {log})"
    else:
        made = "copy" if image["source"] == "copied" else "build"  # a copied image's build_s is its copy's time
        where = f"image {image['id']} ({image['source']}, {made} {image['build_s']:.1f}s)"
    metric = "" if data["metric"] is None else f"  metric {data['metric']:g}"
    line = f"{str(data['sha'])[:12]}  {data['verdict']}{metric}  on {where}  (stored as {data['id']})"
    out_console().print(line, markup=False, soft_wrap=True)
    for run in data["runs"]:
        if run["verdict"] not in ("good", "bad", "measured") and run["detail"]:
            err_console().print(run["detail"], markup=False)
        out_console().print(f"  log {run['log']}", markup=False, soft_wrap=True)


def rerun_bisect(
    bisect_id: int, rev: str | None, step_number: int | None, flags: dict[str, Any], output_format: str,
    db_url: str | None,
) -> None:  # fmt: skip
    """`run-at --bisect`: the bisect's build and test at REV (or its step N), --repeat times, stored with it."""
    from bisector.report.model import BisectReport
    from bisector.runner.side_runs import SideRunsCancelledError
    from bisector.runner.wiring import make_coordinator, open_store

    values = option_values(flags)
    times = values.pop("repeat", 1)
    assert isinstance(times, int)
    overrides = executor_overrides(flags)
    with stoppable_by_signals(), translated_errors(), open_store(db_url) as store:
        if (rev is None) == (step_number is None):
            raise CLIError("give REV or --step N (one of them)")
        if step_number is not None:
            rev = BisectReport.load(store, bisect_id).step(step_number).sha
        assert rev is not None
        with contextlib.redirect_stdout(sys.stderr):
            try:
                results = make_coordinator(store, observer()).rerun(bisect_id, rev, times, overrides)
            except SideRunsCancelledError as cancelled:  # `bisect cancel`: not bad input, and no run decided
                click.echo(f"bisect {bisect_id}: {cancelled}", err=True)
                sys.exit(EXIT_NO_CULPRIT)
    rows: list[dict[str, Any]] = [
        {
            "sha": r.sha, "verdict": r.verdict.value, "metric": r.samples[-1] if r.samples else None,
            "worker": r.worker, "gpus": list(r.gpus), "image": r.image.id if r.image else None,
            "image_origin": image_origin(r.image.summary()) if r.image else None, "run_s": r.run_s,
            "log": str(r.log_path),
        }
        for r in results
    ]  # fmt: skip
    if output_format == "json":
        click.echo(json.dumps(rows, indent=2))
    for row in rows if output_format != "json" else []:
        metric = f"  metric {row['metric']:g}" if row["metric"] is not None else ""
        image = f"  image {str(row['image'])[:12]} ({row['image_origin']})" if row["image"] else ""
        click.echo(
            f"{str(row['sha'])[:12]}  {row['verdict']}{metric}  on {row['worker']} "
            f"(GPUs {','.join(map(str, row['gpus'])) or '-'}){image}  {row['run_s']:.1f}s  log {row['log']}"
        )
    if any(r.verdict not in (Verdict.GOOD, Verdict.BAD, Verdict.MEASURED) for r in results):
        sys.exit(EXIT_NO_CULPRIT)


@click.command(hidden=True)
@click.argument("bisect_id", type=int)
@click.argument("rev", required=False)
@click.option("--step", "step_number", type=int, metavar="N", help="Same as run-at's --step.")
@click.option("--times", type=int, default=1, help="Same as run-at's --repeat.")
@spec_options(*sorted(RERUN_FLAGS - {"repeat"}))
@db_option
def rerun(
    bisect_id: int, rev: str | None, step_number: int | None, times: int, db_url: str | None, **flags: Any
) -> None:
    """Same as `bisect run-at --bisect BISECT_ID [REV] [--step N] [--repeat TIMES]` (kept for scripts)."""
    rerun_bisect(bisect_id, rev, step_number, {**flags, "repeat": times}, "text", db_url)
