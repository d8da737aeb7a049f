"""What gpu-bisect keeps on this host besides images: `bisect step-logs ls|prune` (step logs and their retention) and
`bisect worktrees ls|prune` (the workers' git worktrees)."""

from __future__ import annotations

import json

import click

from bisector.cli.support import db_option, output_format_option, translated_errors


@click.group(name="step-logs")
def step_logs() -> None:
    """Step logs: one folder per bisect, the oldest ended ones removed over $BISECT_LOGS_MAX_SIZE (default 10G)."""


@step_logs.command(name="ls")
@output_format_option(("text", "json"), "A table, or a JSON list (bisect, size, last_write, ended, state, path).")
@db_option
def logs_ls(output_format: str, db_url: str | None) -> None:
    """List the store's log folders on this host, oldest bisect first, with their sizes."""
    from bisector.runner.log_retention import LogFolder, log_folders
    from bisector.runner.wiring import open_store

    with translated_errors(), open_store(db_url, read_only=True) as store:
        folders = log_folders(store)

    def state(folder: LogFolder) -> str:
        return "removed" if folder.pruned else ("ended" if folder.removable else "running or paused")

    if output_format == "json":
        rows = [
            {
                "bisect": f.bisect_id, "size": f.size_bytes, "last_write": f.last_write,
                "ended": f.ended.isoformat() if f.ended else None, "state": state(f), "path": str(f.path),
            }
            for f in folders
        ]  # fmt: skip
        click.echo(json.dumps(rows, indent=2))
        return
    if not folders:
        click.echo("no step logs")
        return
    for f in folders:
        click.echo(f"bisect {f.bisect_id:<6} {f.size_bytes / (1 << 20):9.1f} MiB  {state(f):<17} {f.path}")
    click.echo(f"{sum(f.size_bytes for f in folders) / (1 << 20):.1f} MiB in {len(folders)} folder(s)")


@step_logs.command(name="prune")
@click.option("--older-than", help="Remove the logs of ended bisects last written longer ago (30d, 12h).")
@click.option("--max-size", help="Remove the oldest ended bisects' logs until the store's take at most this (5G).")
@db_option
def logs_prune(older_than: str | None, max_size: str | None, db_url: str | None) -> None:
    """Remove the step logs of ended bisects: the oldest over --max-size, and those older than --older-than. A
    folder written in the last hour is kept; each removed one keeps a note that `bisect show` prints."""
    from bisector.runner.image_admin import prune_limits
    from bisector.runner.log_retention import prune_logs
    from bisector.runner.wiring import open_store

    with translated_errors():
        if older_than is None and max_size is None:
            raise click.UsageError("say --max-size, --older-than or both")
        max_bytes, older_than_s = prune_limits(max_size, older_than)
        with open_store(db_url, read_only=True) as store:
            removed = prune_logs(store, max_bytes=max_bytes, older_than_s=older_than_s)
    freed = sum(f.size_bytes for f in removed) / (1 << 20)
    click.echo(f"removed the logs of {len(removed)} bisect(s), {freed:.1f} MiB")


# `bisect logs`, its name before `bisect log` (git's) sat beside it: kept for scripts
logs = click.Group(name="logs", commands=step_logs.commands, hidden=True, help="Same as `bisect step-logs`.")


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
    from bisector.runner.worktrees import list_worktrees

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
    """Remove the worktrees no worker uses now (with --repo, that repository's only), then the submodule cache's
    repositories, shared by every repository, that no worktree is left in and none used for a day (all are made
    again when needed)."""
    from bisector.runner.worktrees import prune_worktrees

    with translated_errors():
        pruned = prune_worktrees(repo)
    freed = sum(info.size_bytes for info in pruned.removed) / 1e6
    click.echo(f"removed {len(pruned.removed)} worktree(s), {freed:.1f} MB; {len(pruned.kept)} in use kept")
    if pruned.submodule_caches:
        cache_freed = sum(pruned.submodule_caches.values()) / 1e6
        click.echo(f"removed {len(pruned.submodule_caches)} submodule cache repositories, {cache_freed:.1f} MB")
