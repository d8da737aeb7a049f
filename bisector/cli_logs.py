"""`bisect logs ls|prune`: the step logs a store's bisects keep on this host, and their retention."""

from __future__ import annotations

import json

import click

from bisector.cli_support import db_option, output_format_option, translated_errors


@click.group()
def logs() -> None:
    """Step logs: one folder per bisect, the oldest ended ones removed over $BISECT_LOGS_MAX_SIZE (default 10G)."""


@logs.command(name="ls")
@output_format_option(("text", "json"), "A table, or a JSON list (bisect, size, last_write, ended, state, path).")
@db_option
def logs_ls(output_format: str, db_url: str | None) -> None:
    """List the store's log folders on this host, oldest bisect first, with their sizes."""
    from bisector.app import open_store
    from bisector.log_retention import LogFolder, log_folders

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


@logs.command(name="prune")
@click.option("--older-than", help="Remove the logs of ended bisects last written longer ago (30d, 12h).")
@click.option("--max-size", help="Remove the oldest ended bisects' logs until the store's take at most this (5G).")
@db_option
def logs_prune(older_than: str | None, max_size: str | None, db_url: str | None) -> None:
    """Remove the step logs of ended bisects: the oldest over --max-size, and those older than --older-than. A
    folder written in the last hour is kept; each removed one keeps a note that `bisect show` prints."""
    from bisector.app import open_store
    from bisector.image_admin import prune_limits
    from bisector.log_retention import prune_logs

    with translated_errors():
        if older_than is None and max_size is None:
            raise click.UsageError("say --max-size, --older-than or both")
        max_bytes, older_than_s = prune_limits(max_size, older_than)
        with open_store(db_url, read_only=True) as store:
            removed = prune_logs(store, max_bytes=max_bytes, older_than_s=older_than_s)
    freed = sum(f.size_bytes for f in removed) / (1 << 20)
    click.echo(f"removed the logs of {len(removed)} bisect(s), {freed:.1f} MiB")
