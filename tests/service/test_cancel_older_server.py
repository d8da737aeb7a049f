"""`bisect cancel --server` against a server that answers a cancel as servers before the reruns list did
({"id", "status", "rerun"}): one line, as of a current server, no traceback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from bisect_helpers import cli_env, run_cli


class _OlderServer(BaseHTTPRequestHandler):
    answer: ClassVar[dict[str, object]] = {}
    paths: ClassVar[list[str]] = []

    def do_DELETE(self) -> None:
        self.paths.append(self.path)
        body = json.dumps(self.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def older_server() -> Iterator[tuple[str, type[_OlderServer]]]:
    handler = type("Handler", (_OlderServer,), {"answer": {}, "paths": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("answer", "line"),
    [
        ({"id": 3, "status": "cancelled", "rerun": None}, "bisect 3: cancelled\n"),
        (
            {"id": 3, "status": "found", "rerun": "ab" * 20},
            f"bisect 3: already found; its rerun at {'ab' * 6} cancelled\n",
        ),
        (
            {"id": 3, "status": "found", "ended_before": True, "reruns": [], "asked_to_stop": ["cd" * 20]},
            f"bisect 3: already found; its rerun at {'cd' * 6} asked to stop (still running)\n",
        ),
    ],
)
def test_a_cancel_answered_the_older_way_prints_one_line(older_server, answer, line) -> None:
    url, handler = older_server
    handler.answer = answer
    done = run_cli("cancel", "3", "--server", url, env=cli_env(BISECT_TOKEN="t"))

    assert (done.returncode, done.stdout, done.stderr) == (0, line, "")


def test_a_wait_longer_than_a_server_waits_is_asked_as_its_most(older_server) -> None:
    """A server refuses wait_s over its most (RERUN_STOP_WAIT_S); the help says a server waits at most that."""
    url, handler = older_server
    handler.answer = {"id": 3, "status": "cancelled", "ended_before": False, "reruns": [], "asked_to_stop": []}
    done = run_cli("cancel", "3", "--server", url, "--wait", "100", env=cli_env(BISECT_TOKEN="t"))

    assert (done.returncode, done.stdout, done.stderr) == (0, "bisect 3: cancelled\n", "")
    assert handler.paths == ["/api/bisects/3?wait_s=60.0"]
