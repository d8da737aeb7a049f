"""`bisect demo init|run`: the embedded demo, a kernel-stack history with a planted batch-variance regression."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from bisector.cli.bisect import start, start_bisect
from bisector.cli.support import EXIT_NO_CULPRIT, err_console, format_option, translated_errors

DEMO_MARKER = "gpu-bisect-demo"  # in .git/ of a demo repository: `demo` may overwrite it


@click.group()
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
    from bisector.core.spec import check_workers
    from bisector.vocab.paths import data_dir

    with translated_errors():
        check_workers(workers)  # before the demo repository is written
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
        record = start_bisect(**sub.params)
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
    except OSError as exc:
        raise InputError(f"cannot write the demo repository in {directory}: {exc.strerror}") from None
    (directory / ".git" / DEMO_MARKER).write_text(f"seed={seed} commits={commits}\n")
    return repo
