"""Where the HTTP servers (`bisect dashboard`, `bisect serve`) listen. The socket is bound before anything else
starts, so a port in use is one line before any work is done (a second `bisect serve` on a taken port must not
resume jobs first), and `--port 0` prints the port the kernel chose rather than 0."""

from __future__ import annotations

import socket
from typing import Any

from bisector.vocab.errors import InputError

BACKLOG = 2048  # uvicorn's default


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (an IPv6 literal when host has a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart must not wait out TIME_WAIT
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {_bracketed(host)}:{port}: {exc.strerror or exc}") from None
    return sock


def url_of(host: str, sock: socket.socket) -> str:
    """The URL a client reaches: the host as given, the port as bound."""
    return shown_url(host, sock.getsockname()[1])


def shown_url(host: str, port: int) -> str:
    return f"http://{_bracketed(host)}:{port}/"


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def run(app: Any, sock: socket.socket) -> None:
    """Serve app on the bound socket until SIGINT / SIGTERM (uvicorn's handling); the socket is closed after."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
