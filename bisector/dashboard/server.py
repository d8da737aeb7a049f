"""Starting the dashboard: settings from the command line, the token rule, uvicorn."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from bisector.dashboard.app import DashboardSettings, create_app
from bisector.dashboard.listen import bind, run, url_of
from bisector.db.store import Store
from bisector.service.client import TOKEN_VARIABLE
from bisector.service.tokens import tokens_from_options
from bisector.vocab.errors import InputError
from bisector.vocab.paths import store_log_dir


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (localhost, 127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        raise InputError(f"--host {host!r}: not an address or a resolvable name") from None
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def settings_from_options(
    host: str, port: int, token_file: str | None, tokens_file: str | None, log_dir: str | None, db_url: str | None
) -> tuple[DashboardSettings, str, int]:
    """The app's settings and where to bind; refuses a non-loopback address without a token."""
    tokens = tokens_from_options(token_file, tokens_file)
    if tokens is None and not is_loopback(host):
        raise InputError(
            f"--host {host} is reachable from other machines: give --tokens-file, or set ${TOKEN_VARIABLE} or "
            "--token-file to require a token"
        )
    logs = Path(log_dir).expanduser() if log_dir else _store_logs(db_url)
    return DashboardSettings(db_url=db_url, log_dir=logs, tokens=tokens), host, port


def serve(settings: DashboardSettings, host: str, port: int) -> None:
    """Open the store, then serve until interrupted (the store is closed on the way out)."""
    import sys

    sock = bind(host, port)
    try:
        app = create_app(settings, Store.open(settings.db_url))
    except BaseException:
        sock.close()
        raise
    print(f"bisect dashboard: {url_of(host, sock)} over {app.state.store.url}", file=sys.stderr, flush=True)
    run(app, sock)


def _store_logs(db_url: str | None) -> Path:
    """The store's own log folder: the logs of other stores sharing the data dir are not served."""
    with Store.open(db_url, read_only=True) as store:
        return store_log_dir(store.identity)
