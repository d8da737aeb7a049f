"""`bisect serve` and the client side of a server: `bisect submit`, and `--server` for status, report, cancel, mark,
resume and run-at.

Each command parses, makes one call (the service's server, or `ServiceClient`), and translates errors.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bisector.cli.support import CLIError, db_option, output_format_option, translated_errors
from bisector.service.body_limit import DEFAULT_MAX_REQUEST_BYTES

if TYPE_CHECKING:
    from bisector.report.resume import Commands

F = TypeVar("F", bound=Callable[..., Any])
# `bisect start` options that a server decides itself (where steps run, its store, notifications).
SERVER_DECIDES = frozenset({"db_url", "output_format", "executor", "ray_address", "resources", "workers", "notify_url"})
SUBMIT_KEYS = ("recipe", "priority")  # submit's own options, sent as they are
DASHBOARD_MODULES = frozenset({"fastapi", "starlette", "uvicorn", "jinja2"})  # the `dashboard` extra


@contextmanager
def needs_dashboard_extra(command: str) -> Iterator[None]:
    """Imports of the server's modules within: without the `dashboard` extra, one line saying how to install it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in DASHBOARD_MODULES:
            raise
        raise CLIError(f"bisect {command} needs the dashboard extra: pip install 'gpu-bisect[dashboard]'") from None


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; others than loopback: reads need a token too.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option(
    "--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True, help="The pool's workers."
)
@click.option(
    "--slots",
    type=int,
    default=1,
    show_default=True,
    help="Worker slots shared by all jobs (jobs running at once at most).",
)
@click.option("--ray-address", envvar="RAY_ADDRESS", help="With --executor ray: the cluster to join.")
@click.option(
    "--allow-repo", "allow_repos", multiple=True, metavar="PATH|URL", help="A repository served (repeatable)."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="TOML: allow_repos, allow_commands, [recipes.NAME].",
)
@click.option(
    "--allow-commands", is_flag=True, help="Accept free-form run/build/env from the API (otherwise recipes only)."
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="File holding the one token, named default (or $BISECT_TOKEN).",
)
@click.option(
    "--tokens-file",
    type=click.Path(dir_okay=False),
    help='TOML: one name = "token" per person, admins = [names]; instead of the one token.',
)
@click.option("--mirror-dir", type=click.Path(file_okay=False), help="The server's clones (default: data dir/mirrors).")
@click.option(
    "--max-request-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_REQUEST_BYTES,
    show_default=True,
    help="A larger request body is answered 413 without being read.",
)
@db_option
def serve(host: str, port: int, db_url: str | None, **options: Any) -> None:
    """Serve bisects over HTTP: queue submitted jobs over a shared pool of slots, resume them after a restart.

    Each token names a person (--tokens-file; the one token of $BISECT_TOKEN or --token-file is `default`, an
    admin): a job is its submitter's, and only they or an admin may cancel it, rerun its steps or mark its commits.
    The dashboard's pages act too, after a login at /login: submit, cancel, resume, rerun a step, mark a commit.

    SIGTERM, SIGINT or SIGHUP stop it: its running steps are stored as interrupted (the next `bisect serve` over
    the store resumes their jobs), its workers end, and it exits with 128 + the signal's number."""
    from bisector.runner.stopping import StopRequested

    try:
        with translated_errors(), needs_dashboard_extra("serve"):
            from bisector.service.server import config_from_options
            from bisector.service.server import serve as serve_forever

            config = config_from_options(**options)
            serve_forever(config, host, port, db_url)
    except StopRequested as stop:
        click.echo(
            f"bisect serve: stopped by {stop.signal_name}; {stop.interrupted_steps} running step(s) stored as "
            "interrupted; the next `bisect serve` over this store resumes their jobs",
            err=True,
        )
        sys.exit(stop.exit_code)


def server_options(function: F) -> F:
    """--server URL (act on a `bisect serve` instead of the local store) and --token-file."""
    function = click.option(
        "--token-file",
        type=click.Path(dir_okay=False),
        help="With --server: the bearer token's file (or $BISECT_TOKEN).",
    )(function)
    return click.option("--server", help="A `bisect serve` URL: ask it instead of the local store.")(function)


def client(server: str, token_file: str | None) -> Any:
    from bisector.service.client import ServiceClient, read_token

    return ServiceClient(server, read_token(token_file))


def remote_commands(server: str, token_file: str | None) -> Commands:
    """Commands sent to the same server, with its flags as a shell would take them."""
    from bisector.report.resume import Commands

    flags = ["--server", server, *(["--token-file", token_file] if token_file else [])]
    return Commands(" ".join(shlex.quote(a) for a in flags))


def print_remote(server: str, token_file: str | None, bisect_id: int, view: str, output_format: str) -> None:
    """`bisect report|status --server`: the server renders the same output as for a local store, the commands it
    advises (the status's last line, a resume) sent to the server, as this command was."""
    with translated_errors(), client(server, token_file) as service:
        click.echo(service.rendered(bisect_id, view, output_format, remote_commands(server, token_file).server_flags))


def cancel_remote(server: str, token_file: str | None, bisect_id: int, wait_s: float | None) -> None:
    with translated_errors(), client(server, token_file) as service:
        outcome = service.cancel(bisect_id, wait_s)
    if "wait_capped_s" in outcome:
        most_s = outcome["wait_capped_s"]
        click.echo(f"bisect: --wait {wait_s:g} capped at {most_s:g} s, the most {server} waits for reruns", err=True)
    status = str(outcome.get("status", "cancelled"))
    # a server before these fields said {"status", "rerun"}; one before asked_to_stop named only the reruns stopped
    reruns = outcome.get("reruns") or [sha for sha in [outcome.get("rerun")] if sha]
    ended_before = bool(outcome.get("ended_before", status != "cancelled"))
    click.echo(cancelled_line(bisect_id, status, ended_before, reruns, outcome.get("asked_to_stop") or ()))


def cancelled_line(
    bisect_id: int, status: str, ended_before: bool, reruns: Sequence[str], asked: Sequence[str] = ()
) -> str:
    """What `bisect cancel` prints, of a local store or a server: the bisect's end, the reruns it stopped and those
    it asked to stop that still ran when it stopped waiting."""
    ended = f"already {status}" if ended_before else "cancelled"
    stopped = f"; {_reruns_at(reruns)} cancelled" if reruns else ""
    pending = f"; {_reruns_at(asked)} asked to stop (still running)" if asked else ""
    return f"bisect {bisect_id}: {ended}{stopped}{pending}"


def _reruns_at(shas: Sequence[str]) -> str:
    return f"its rerun{'s' if len(shas) > 1 else ''} at {', '.join(s[:12] for s in shas)}"


def rerun_remote(server: str, token_file: str | None, bisect_id: int, rev: str | None, step: int | None) -> None:
    """`bisect run-at --bisect ID --server URL`: the server runs it in the background, once."""
    if (rev is None) == (step is None):
        raise CLIError("give REV or --step N (one of them)")
    with translated_errors(), client(server, token_file) as service:
        started = service.rerun(bisect_id, step=step, rev=rev)
    shows = remote_commands(server, token_file).line("report", bisect_id)
    click.echo(f"bisect {bisect_id}: rerun at {started['sha'][:12]} started; `{shows}` shows it once it ends")


def resume_remote(server: str, token_file: str | None, bisect_id: int) -> None:
    with translated_errors(), client(server, token_file) as service:
        answer = service.resume(bisect_id)
    follow = f"`{remote_commands(server, token_file).line('status', bisect_id)}` follows it"
    done = "resumed" if answer["resumed"] else "not paused"
    click.echo(f"bisect {bisect_id}: {done}; its job is {answer['state']} on {server}; {follow}")


def mark_remote(server: str, token_file: str | None, bisect_id: int, rev: str, verdict: str, note: str) -> None:
    with translated_errors(), client(server, token_file) as service:
        marked = service.mark(bisect_id, rev, verdict, note)
    sha, step, message = marked["sha"][:12], marked["step"], marked["message"]
    from bisector.runner.manual import MarkEffect

    if marked.get("effect") == MarkEffect.AT_RESUME:
        message += f": `{remote_commands(server, token_file).line('resume', bisect_id)}`"
    click.echo(f"bisect {bisect_id}: {sha} marked {verdict} (step {step}); {message}")


def submit_command(start: click.Command) -> click.Command:
    """`bisect submit`: `bisect start`'s options (less those the server decides) sent to a server."""

    @click.command(name="submit")
    @click.option("--server", required=True, help="The `bisect serve` URL.")
    @click.option("--recipe", help="A named recipe of the server or of the repository's bisect.toml at the bad commit.")
    @click.option(
        "--priority",
        type=click.IntRange(0, 100),
        default=0,
        show_default=True,
        help="Higher starts first, gets more slots.",
    )
    @click.option(
        "--token-file", type=click.Path(dir_okay=False), help="File holding the bearer token (or $BISECT_TOKEN)."
    )
    @output_format_option(("text", "json"), "The id, or {id, status}.")
    def submit(server: str, token_file: str | None, output_format: str, **params: Any) -> None:
        """Queue a bisect on a `bisect serve`; prints its id (`bisect status --server URL ID` follows it).

        A submission whose answer does not come (no connection, none in 120 s) is sent again, up to 6 times, with
        the same key: the server answers it with the job it made, never a second one."""
        with translated_errors(), client(server, token_file) as service:
            answer = service.submit(request_from_params(params))
        click.echo(
            json.dumps({"id": answer["id"], "status": answer["status"]}) if output_format == "json" else answer["id"]
        )

    submit.params.extend(p for p in start.params if p.name not in SERVER_DECIDES)
    return submit


def request_from_params(params: dict[str, Any]) -> dict[str, Any]:
    """The JSON request of `bisect submit`'s options: given values only, under their bisect.toml keys; a local
    --repo by its absolute path; --patch files by their texts."""
    from bisector.cli.options import option_values
    from bisector.core.options import BY_NAME

    request: dict[str, Any] = {}
    for name, value in option_values(params).items():
        request[BY_NAME[name].config_key or name] = list(value) if isinstance(value, tuple) else value
    request |= {key: params[key] for key in SUBMIT_KEYS if params.get(key) is not None}
    if "patch" in request:
        request["patch"] = [patch_text(name) for name in request["patch"]]
    repo = str(request.get("repo", "."))
    request["repo"] = str(Path(repo).resolve()) if "://" not in repo and Path(repo).exists() else repo
    return request


def patch_text(name: str) -> str:
    """A --patch file's text: a request carries its patches' texts (the server reads no file of its own)."""
    try:
        return Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise CLIError(f"--patch {name}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise CLIError(f"--patch {name}: not UTF-8 text, which a request to a server carries") from None


@click.command()
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind; others than loopback need a token."
)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option("--token-file", type=click.Path(dir_okay=False), help="File holding the bearer token (or $BISECT_TOKEN).")
@click.option(
    "--tokens-file",
    type=click.Path(dir_okay=False),
    help='TOML: one name = "token" per person, admins = [names]; any of them reads.',
)
@click.option(
    "--log-dir", type=click.Path(file_okay=False), help="Step logs served from here (default: data dir/logs)."
)
@db_option
def dashboard(
    host: str, port: int, token_file: str | None, tokens_file: str | None, log_dir: str | None, db_url: str | None
) -> None:
    """Serve the web dashboard and its JSON API (read-only) over the store."""
    from bisector.cli.service import needs_dashboard_extra

    with translated_errors(), needs_dashboard_extra("dashboard"):
        from bisector.dashboard.server import serve, settings_from_options

        settings, bind_host, bind_port = settings_from_options(host, port, token_file, tokens_file, log_dir, db_url)
        serve(settings, bind_host, bind_port)
