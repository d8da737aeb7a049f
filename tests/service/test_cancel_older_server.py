"""`bisect cancel --server` against a server that answers a cancel as servers before the reruns list did
({"id", "status", "rerun"}): one line, as of a current server, no traceback; and against servers that wait at most
another time than this client's RERUN_STOP_WAIT_S, or refuse a longer wait without stating their most."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest
from bisect_helpers import cli_env, run_cli


class _OlderServer(BaseHTTPRequestHandler):
    answer: ClassVar[dict[str, object]] = {}
    paths: ClassVar[list[str]] = []
    most_wait_s: ClassVar[float] = math.inf
    refusal: ClassVar[dict[str, object]] = {}  # the 422's body to a wait_s over most_wait_s

    def do_DELETE(self) -> None:
        self.paths.append(self.path)
        wait_s = parse_qs(urlparse(self.path).query).get("wait_s", ["0"])[0]
        refused = float(wait_s) > self.most_wait_s
        body = json.dumps(self.refusal if refused else self.answer).encode()
        self.send_response(422 if refused else 200)
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


CANCELLED = {"id": 3, "status": "cancelled", "ended_before": False, "reruns": [], "asked_to_stop": []}
# FastAPI's own refusal, as servers before max_wait_s answered a wait over their most (RERUN_STOP_WAIT_S)
PYDANTIC_REFUSAL = {"detail": [{"type": "less_than_equal", "loc": ["query", "wait_s"], "ctx": {"le": 60.0}}]}


@pytest.mark.parametrize(
    ("most_wait_s", "refusal", "paths", "note"),
    [
        (30.0, {"detail": "wait_s: at most 30 seconds", "max_wait_s": 30.0}, ["100.0", "30.0"], 30),
        (600.0, {"detail": "wait_s: at most 600 seconds", "max_wait_s": 600.0}, ["100.0"], None),
        (60.0, PYDANTIC_REFUSAL, ["100.0", "60.0"], 60),
    ],
    ids=["server-waits-less", "server-waits-more", "server-before-max-wait-s"],
)
def test_a_wait_is_capped_at_the_most_the_server_states_and_the_cli_says_so(
    older_server, most_wait_s: float, refusal: dict[str, object], paths: list[str], note: int | None
) -> None:
    url, handler = older_server
    handler.answer, handler.most_wait_s, handler.refusal = CANCELLED, most_wait_s, refusal
    done = run_cli("cancel", "3", "--server", url, "--wait", "100", env=cli_env(BISECT_TOKEN="t"))

    said = "" if note is None else f"bisect: --wait 100 capped at {note} s, the most {url} waits for reruns\n"
    assert (done.returncode, done.stdout, done.stderr) == (0, "bisect 3: cancelled\n", said)
    assert handler.paths == [f"/api/bisects/3?wait_s={wait}" for wait in paths]
