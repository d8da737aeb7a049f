"""The request-body limit of `bisect serve`: an ASGI middleware outside every route and the token check.

A body declared larger than the limit (Content-Length) is answered 413 before any of it is read; a chunked body
(Transfer-Encoding, with or without a Content-Length beside it) is read up to the limit and answered 413 as soon as
it passes it. Either way the connection is closed after the answer, so the rest of the body is never read. A body
within the limit reaches the app whole.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_REQUEST_BYTES = 64 * 1024  # a request names a range, a recipe and a few settings: a few hundred bytes


class RequestBodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # With Transfer-Encoding the server frames the body by its chunks, whatever Content-Length says: count them.
        declared = None if _header(scope, b"transfer-encoding") is not None else _content_length(scope)
        if declared is not None:  # the server reads no more than the declared length
            if declared > self.max_bytes:
                await self._refuse(send)
            else:
                await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"detail": f"the request body is over {self.max_bytes} bytes"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]  # fmt: skip
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, wanted: bytes) -> bytes | None:
    return next((value for name, value in scope["headers"] if name == wanted), None)


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    return int(value) if value is not None and value.isdigit() else None


def _replay(body: bytes, receive: Receive) -> Receive:
    """receive, giving the body already read first."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
