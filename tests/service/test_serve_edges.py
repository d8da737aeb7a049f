"""`bisect serve` at its edges, over real HTTP: request bodies over the limit are answered 413 unread, a missing and
a wrong token are told apart, a bad value is a 4xx naming its field (never a 500), and a job waiting for a slot
says queued wherever it is shown."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_process import DONE_TIMEOUT_S, TOKEN, ServiceProcess, running_service, service_env, service_home
from synthetic import SyntheticHistory, culprit_history

pytestmark = pytest.mark.xdist_group("service")

MAX_REQUEST_BYTES = 4096
SAFETY_NET_S = 120.0  # a socket read's bound against a hang, never a speed target
CHUNKED_CAP_BYTES = 16 * 1024 * 1024  # a server still reading after this much ignores its limit


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> SyntheticHistory:
    return culprit_history(tmp_path_factory.mktemp("hist") / "repo", 12, 7, sleep_s=0.05)


@pytest.fixture(scope="module")
def started_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the `hold` recipe's tests write their pids as they start."""
    return tmp_path_factory.mktemp("started")


@pytest.fixture(scope="module")
def service(
    history: SyntheticHistory, started_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    home = tmp_path_factory.mktemp("home")
    config = home / "serve.toml"
    config.write_text(
        f'[recipes.synthetic]\nrun = "bash test.sh"\n\n[recipes.hold]\nrun = "echo $$ > {started_dir}/$$; sleep 600"\n'
    )
    db = f"sqlite:///{home / 'bisect.db'}"
    args = ["--db", db, "--allow-repo", str(history.path), "--config", str(config), "--slots", "1",
            "--max-request-bytes", str(MAX_REQUEST_BYTES)]  # fmt: skip
    with running_service(*args, **service_home(home)) as served:
        served.db = db  # type: ignore[attr-defined]
        served.home_env = service_home(home)  # type: ignore[attr-defined]
        yield served


def submission(history: SyntheticHistory, **extra: object) -> dict[str, object]:
    return {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "synthetic",
            "explain": False, **extra}  # fmt: skip


def request_head(port: int, token: str | None, body_header: str) -> bytes:
    lines = ["POST /api/bisects HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json", body_header]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def status_of(sock: socket.socket) -> int:
    """The status code of the answer on sock (read until its first line is whole)."""
    sock.settimeout(SAFETY_NET_S)
    answer = b""
    while b"\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("token", [TOKEN, None])
def test_a_body_declared_over_the_limit_is_answered_413_before_any_of_it_is_sent(
    service: ServiceProcess, token: str | None
) -> None:
    before = service.count()
    with socket.create_connection(("127.0.0.1", service.port)) as sock:
        sock.sendall(request_head(service.port, token, "Content-Length: 100000000"))
        assert status_of(sock) == 413  # not one byte of the 100 MB was sent
    assert service.count() == before


@pytest.mark.parametrize(
    ("token", "framing"),
    [(TOKEN, "Transfer-Encoding: chunked"), (None, "Transfer-Encoding: chunked"),
     (None, "Content-Length: 10\r\nTransfer-Encoding: chunked")],  # a small length beside the chunks counts for nothing
)  # fmt: skip
def test_a_chunked_body_is_read_only_up_to_the_limit_and_answered_413(
    service: ServiceProcess, token: str | None, framing: str
) -> None:
    sent = 0
    with socket.create_connection(("127.0.0.1", service.port)) as sock:
        sock.sendall(request_head(service.port, token, framing))
        chunk = b"10000\r\n" + b"x" * 65536 + b"\r\n"
        while not select.select([sock], [], [], 0.05)[0]:
            assert sent < CHUNKED_CAP_BYTES, "the server read 16 MiB of a body limited to 4 KiB"
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break  # it answered and closed: the answer is read below
            sent += 65536
        assert status_of(sock) == 413


def test_a_chunked_body_within_the_limit_is_served(service: ServiceProcess, history: SyntheticHistory) -> None:
    body = json.dumps(submission(history, infra_patterns=["x" * (MAX_REQUEST_BYTES // 2)])).encode()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    answer = httpx.post(f"{service.base}/api/bisects", content=iter([body[:100], body[100:]]), headers=headers)
    assert answer.status_code == 201, answer.text
    assert service.wait_done(answer.json()["id"])["first_bad"]["sha"] == history.shas[history.first_bad]


@pytest.mark.parametrize(
    ("authorization", "detail"),
    [
        (None, "no token given"),
        ("Basic dGVzdDp0ZXN0", "no token given"),
        ("Bearer", "no token given"),
        ("Bearer wrong-token", "token not accepted"),
        (f"Bearer {TOKEN}x", "token not accepted"),
    ],
)
def test_a_missing_and_a_wrong_token_are_told_apart(
    service: ServiceProcess, history: SyntheticHistory, authorization: str | None, detail: str
) -> None:
    for answer in (service.post(submission(history), authorization=authorization),
                   service.delete(1, authorization=authorization)):  # fmt: skip
        assert answer.status_code == 401
        assert answer.json()["detail"].startswith(detail)


@pytest.mark.parametrize("path", ["/api/bisects", "/api/bisects/1/rerun", "/api/bisects/1/marks"])
@pytest.mark.parametrize("body", [[], "main", 7, None])
def test_a_body_that_is_not_a_json_object_is_a_400_saying_so(service: ServiceProcess, path: str, body: object) -> None:
    answer = httpx.post(f"{service.base}{path}", json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60.0)
    assert (answer.status_code, answer.json()) == (400, {"detail": "the request must be a JSON object"})


@pytest.mark.parametrize("path", ["/api/bisects", "/api/bisects/1/rerun", "/api/bisects/1/marks"])
@pytest.mark.parametrize("body", [b"{not json", b"[1,", b"\xff\xfe"])
def test_a_body_that_is_not_json_is_a_400_saying_so(service: ServiceProcess, path: str, body: bytes) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    answer = httpx.post(f"{service.base}{path}", content=body, headers=headers, timeout=60.0)
    assert (answer.status_code, answer.json()) == (400, {"detail": "the request body is not JSON"})


def test_a_value_of_the_wrong_type_is_a_422_naming_its_parameter(service: ServiceProcess) -> None:
    token = {"Authorization": f"Bearer {TOKEN}"}
    wait = httpx.delete(f"{service.base}/api/bisects/1", params={"wait_s": "-1"}, headers=token, timeout=60.0)
    assert (wait.status_code, wait.json()) == (422, {"detail": "wait_s: Input should be greater than or equal to 0"})
    long_key = {**token, "Idempotency-Key": "k" * 201}
    key = httpx.post(f"{service.base}/api/bisects", json={}, headers=long_key, timeout=60.0)
    detail = "idempotency-key: String should have at most 200 characters"
    assert (key.status_code, key.json()) == (422, {"detail": detail})


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"paths": ["/etc"]}, "paths: '/etc' is outside the repository"),
        ({"paths": ["src/../../x"]}, "paths: 'src/../../x' is outside the repository"),
        ({"paths": [":(bogus)a"]}, "paths: ':(bogus)a': pathspec magic is not supported"),
        ({"gpus_per_step": 1000}, "gpus_per_step: must be 64 or fewer (got 1000)"),
        ({"timeout": -1}, "timeout: must be a positive number of seconds"),
        ({"timeout": "60"}, "timeout: expected a whole number or a number, got str '60'"),
        ({"bad": "main\u0000"}, "bad: a NUL character"),
    ],
)
def test_a_bad_value_is_a_400_naming_its_field(
    service: ServiceProcess, history: SyntheticHistory, change: dict[str, object], detail: str
) -> None:
    before = service.count()
    answer = service.post(submission(history, **change))
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"].startswith(detail)
    assert service.count() == before


def bisect_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_a_job_waiting_for_a_slot_says_queued_in_the_api_the_page_and_the_cli(
    service: ServiceProcess, history: SyntheticHistory, started_dir: Path
) -> None:
    holding = service.post(submission(history, recipe="hold")).json()["id"]
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while not any(started_dir.iterdir()):  # the one slot is taken
        assert time.monotonic() < deadline
        time.sleep(0.1)
    waiting = service.post(submission(history)).json()["id"]
    try:
        assert service.job(waiting)["state"] == "queued"
        env = service_env(**service.home_env)  # type: ignore[attr-defined]
        for where in (["--server", service.base], ["--db", service.db]):  # type: ignore[attr-defined]
            shown = bisect_cli("status", str(waiting), *where, env=env)
            assert shown.returncode == 0, shown.stderr
            lines = shown.stdout.splitlines()
            assert lines[0] == f"bisect {waiting}: queued"
            assert "queue: waiting for a slot of the server that stored it, behind 0 queued job(s)" in lines
            assert "resume" not in shown.stdout
        page = httpx.get(f"{service.base}/bisects/{waiting}", timeout=60.0).text
        assert '<span id="status" class="status running">queued</span>' in page
        running = bisect_cli("status", str(holding), "--server", service.base, env=env).stdout
        assert running.splitlines()[0] == f"bisect {holding}: running"
    finally:
        for bisect_id in (waiting, holding):
            service.delete(bisect_id)
    service.wait_done(holding)
