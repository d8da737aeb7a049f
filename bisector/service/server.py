"""`bisect serve`: wire the store, the pool, the scheduler and the app together; serve until stopped.

The one place that builds the service's parts. uvicorn answers in a thread of its own; the main thread waits for a
stop signal (bisector/runner/stopping.py: SIGTERM, SIGINT or SIGHUP raise StopRequested there, later ones are ignored).
Then uvicorn stops answering (requests in flight get HTTP_STOP_GRACE_S; the mirrors' git commands, which a
submission may wait on, are ended at once: bisector/service/mirrors.py), the scheduler stops every coordinator
(running steps stored as interrupted, jobs left running for the next server), the pool closes its executor (each
worker ends its test and exits) and the stores close, before StopRequested reaches the command, which exits
128 + the signal's number. uvicorn ending by itself (it could not start, or failed while serving) stops the rest
the same way, and the command ends with one line naming why (HttpServerEndedError), exit 2.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bisector.dashboard.app import DashboardSettings, create_app
from bisector.dashboard.listen import bind, url_of
from bisector.dashboard.server import is_loopback
from bisector.dashboard.service_routes import add_service_routes
from bisector.db.store import Store
from bisector.runner.stopping import StopRequested, stop_on_signals
from bisector.service.config import ServiceConfig, read_config_file
from bisector.service.mirrors import Mirrors
from bisector.service.scheduler import JobScheduler
from bisector.service.secret_key import secret_key
from bisector.service.service import BisectService
from bisector.service.tokens import tokens_from_options
from bisector.vocab.errors import BisectError, InputError
from bisector.vocab.paths import data_dir, store_log_dir
from bisector.workers.executor import Executor
from bisector.workers.pool import SlotPool

TOKEN_HELP = "give --tokens-file, or set $BISECT_TOKEN or --token-file: the write endpoints need bearer tokens"
STOP_WAIT_S = 1.0  # how often the main thread looks whether uvicorn ended by itself
HTTP_STOP_GRACE_S = 10  # how long requests in flight at a stop may go on (a client still sending its body)
FORM_KEY_FILE = "serve-form.key"  # in the data directory: the key of the forms' CSRF tokens


def config_from_options(
    *,
    allow_repos: tuple[str, ...],
    config_file: str | None,
    token_file: str | None,
    tokens_file: str | None,
    slots: int,
    executor: str,
    ray_address: str | None,
    allow_commands: bool,
    mirror_dir: str | None,
    max_request_bytes: int,
) -> ServiceConfig:
    tokens = tokens_from_options(token_file, tokens_file)
    if tokens is None:
        raise InputError(f"bisect serve: {TOKEN_HELP}")
    from_file = read_config_file(config_file) if config_file else {"allow_repos": [], "recipes": {}}
    return ServiceConfig(
        allowed_repos=(*from_file["allow_repos"], *allow_repos),
        mirror_dir=Path(mirror_dir).expanduser() if mirror_dir else data_dir() / "mirrors",
        tokens=tokens,
        slots=slots,
        executor=executor,
        ray_address=ray_address,
        allow_commands=allow_commands or bool(from_file.get("allow_commands", False)),
        recipes=from_file["recipes"],
        max_request_bytes=max_request_bytes,
        form_key=secret_key(data_dir() / FORM_KEY_FILE),
    )


def make_executor(config: ServiceConfig, repo: Path) -> Executor:
    """The pool's one real executor (its workers' worktrees start in repo's mirror; other repositories' steps
    re-make a slot's worktree for theirs)."""
    if config.executor == "ray":
        from bisector.workers.ray_executor import RayExecutor

        return RayExecutor(str(repo), config.slots, None, {}, config.ray_address)
    from bisector.workers.local import LocalExecutor

    return LocalExecutor(str(repo), config.slots)


def serve(config: ServiceConfig, host: str, port: int, db_url: str | None) -> None:
    """Serve until SIGTERM, SIGINT or SIGHUP (StopRequested, raised once everything has stopped); resumes the jobs a
    previous server left running before answering."""
    if not is_loopback(host):
        print(f"bisect serve: {host} is reachable from other machines; every request needs the token", file=sys.stderr)
    with stop_on_signals():
        sock = bind(host, port)
        try:
            _serve_on(sock, config, host, db_url)
        finally:
            sock.close()


def _serve_on(sock: socket.socket, config: ServiceConfig, host: str, db_url: str | None) -> None:
    with Store.open(db_url) as store:
        mirrors = Mirrors(config.mirror_dir, config.allowed_repos)
        first_mirror = mirrors.sync(mirrors.allowed[0])  # clone or fetch; the others are cloned at their first job
        pool = SlotPool(make_executor(config, first_mirror), stop_error=lambda: StopRequested(signal.SIGTERM))
        scheduler = JobScheduler(store, pool)
        stopping: StopRequested | None = None
        try:
            service = BisectService(config, store, mirrors, scheduler)
            settings = DashboardSettings(
                db_url=db_url,
                log_dir=store_log_dir(store.identity),
                tokens=None if is_loopback(host) else config.tokens,
            )
            app = create_app(settings, Store.open(db_url))
            add_service_routes(app, service)
            scheduler.start()
            print(
                f"bisect serve: {url_of(host, sock)} over {store.url}, {config.slots} slot(s), "
                f"repositories: {', '.join(mirrors.allowed)}",
                file=sys.stderr,
                flush=True,
            )
            # The mirrors' git runs in the main thread (ended by itself at a signal) and in requests' threads: it is
            # stopped as uvicorn stops, whatever stops it.
            answer_until_stopped(app, sock, on_stop=mirrors.stop)
        except StopRequested as stop:
            stopping = stop
            raise
        finally:
            interrupted = scheduler.stop()
            if stopping is not None:
                stopping.interrupted_steps = interrupted
            pool.close()


class HttpServerEndedError(BisectError):
    """uvicorn ended without a stop signal: it could not start, or failed while it served."""


def answer_until_stopped(app: Any, sock: socket.socket, on_stop: Callable[[], None]) -> None:
    """uvicorn in a thread (so it installs no signal handlers of its own), until a stop signal reaches this thread
    (StopRequested) or uvicorn ends by itself (HttpServerEndedError, naming why in one line). At a stop uvicorn answers
    no new request, on_stop ends what requests in flight wait on, and uvicorn cancels those still in flight after
    HTTP_STOP_GRACE_S; this raises once uvicorn has stopped, or that long and a second after on_stop returned."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=HTTP_STOP_GRACE_S)
    server = uvicorn.Server(config)
    ended = threading.Event()  # waited on rather than joined: a join that a signal interrupts marks the thread ended
    failure: list[BaseException] = []
    error_log, startup_errors = logging.getLogger("uvicorn.error"), _StartupErrors(server)
    error_log.addFilter(startup_errors)

    def answer() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # SystemExit too: uvicorn exits so when it cannot start
            failure.append(exc)
        finally:
            ended.set()

    threading.Thread(target=answer, name="http", daemon=True).start()
    try:
        while not ended.wait(STOP_WAIT_S):
            pass
    finally:
        error_log.setLevel(logging.CRITICAL)  # requests the stop cancels are no errors
        error_log.removeFilter(startup_errors)
        server.should_exit = True
        on_stop()
        ended.wait(HTTP_STOP_GRACE_S + STOP_WAIT_S)
    why = _why_ended(failure, startup_errors.lines)
    raise HttpServerEndedError(f"the HTTP server (uvicorn) ended by itself: {why}")


class _StartupErrors(logging.Filter):
    """Keeps uvicorn's errors logged before it has started (a failed start: a traceback, then "Application startup
    failed"), the last line of each, instead of printing them: the error that ends the command names them."""

    def __init__(self, server: Any) -> None:
        super().__init__()
        self.server = server
        self.lines: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if self.server.started:
            return True
        if record.levelno >= logging.ERROR and (lines := record.getMessage().strip().splitlines()):
            self.lines = [*self.lines[-2:], lines[-1]]  # a traceback's last line names its exception
        return False


def _why_ended(failure: list[BaseException], logged: list[str]) -> str:
    """One line: the exception that ended uvicorn's thread, else the errors it logged before it exited."""
    exc = failure[0] if failure else None
    if exc is not None and not isinstance(exc, SystemExit):
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    if logged:
        return "; ".join(logged)
    return f"it exited with status {exc.code}" if exc is not None else "it returned"
