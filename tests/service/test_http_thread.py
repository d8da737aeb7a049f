"""The HTTP thread of `bisect serve` (bisector/service/server.py): uvicorn that ends without a stop signal, on a real
socket, is an error naming its cause in one line, after the server's stop ran; never a silent return."""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from fastapi import FastAPI

from bisector.dashboard.listen import bind
from bisector.service.server import HttpServerEndedError, answer_until_stopped


def failing_to_start(error: Exception) -> FastAPI:
    """An app whose startup raises error (as a store gone at start, say)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        raise error
        yield

    return FastAPI(lifespan=lifespan)


def listening() -> socket.socket:
    return bind("127.0.0.1", 0)


def closed() -> socket.socket:
    sock = bind("127.0.0.1", 0)
    sock.close()
    return sock


@pytest.mark.parametrize(
    ("app", "make_socket", "cause"),
    [
        (failing_to_start(RuntimeError("no store")), listening, "RuntimeError: no store"),
        (FastAPI(), closed, "OSError: [Errno 9] Bad file descriptor"),
    ],
    ids=["startup-fails", "socket-closed"],
)
def test_uvicorn_ending_by_itself_is_one_line_naming_the_cause(
    app: FastAPI, make_socket: Callable[[], socket.socket], cause: str, capfd: pytest.CaptureFixture[str]
) -> None:
    sock = make_socket()
    stopped = threading.Event()
    try:
        with pytest.raises(HttpServerEndedError) as ended:
            answer_until_stopped(app, sock, on_stop=stopped.set)
    finally:
        sock.close()
    message = str(ended.value)
    assert message.startswith("the HTTP server (uvicorn) ended by itself: ")
    assert cause in message
    assert "\n" not in message
    assert stopped.is_set()  # what requests in flight wait on is ended, as at a stop
    assert "Traceback" not in capfd.readouterr().err
