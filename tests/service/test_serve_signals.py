"""SIGTERM, SIGINT or SIGHUP to `bisect serve` while a served bisect's step runs: the step is stored interrupted,
no process the server started survives it, and it exits with 128 + the signal's number (docs/reliability.md). A
request still in flight (a client that declared a body and stalls mid-way, its socket open) is cancelled after
HTTP_STOP_GRACE_S."""

from __future__ import annotations

import contextlib
import signal
import socket
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest
from service_process import DONE_TIMEOUT_S, TOKEN, ServiceProcess, service_env, service_home
from synthetic import culprit_history

pytestmark = pytest.mark.xdist_group("service")
STALLED_REQUEST = (
    f"POST /api/bisects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
    'Content-Length: 1000\r\n\r\n{"repo": '
).encode()


# The remote's side of a mirror's fetch (remote.origin.uploadpack): while the gate file exists it hangs, as a fetch
# from a server that stopped answering does (the test removes the gate at its end, whatever happened).
SLOW_UPLOAD_PACK = """\
if [ -e "$GATE" ]; then echo $$ > "$STARTED"; fi
while [ -e "$GATE" ]; do sleep 0.1; done
exec git-upload-pack "$@"
"""


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(root: int) -> set[int]:
    """Every process below root now (its workers, their tests, whatever they started)."""
    parents = {int(entry.name): parent_of(int(entry.name)) for entry in Path("/proc").iterdir() if entry.name.isdigit()}
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def running(pid: int) -> bool:
    """Whether pid is a live process (a zombie nobody reaped yet is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(condition: object, what: str) -> None:
    deadline = time.monotonic() + DONE_TIMEOUT_S  # a safety net against a hang, never a speed target
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("signum", "stalled_client"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGHUP, False), (signal.SIGTERM, True)],
    ids=["SIGTERM", "SIGINT", "SIGHUP", "SIGTERM-stalled-client"],
)
def test_a_stop_signal_stores_the_running_step_interrupted_and_leaves_no_process(
    tmp_path: Path, signum: signal.Signals, stalled_client: bool
) -> None:
    history = culprit_history(tmp_path / "repo", 12, 7)
    started = tmp_path / "started"
    started.mkdir()
    config = tmp_path / "serve.toml"
    config.write_text(f'[recipes.hold]\nrun = "echo $$ > {started}/$$; sleep 600"\n')
    db = tmp_path / "bisect.db"
    args = ["--db", f"sqlite:///{db}", "--allow-repo", str(history.path), "--config", str(config), "--slots", "1"]
    served = ServiceProcess(args, service_env(**service_home(tmp_path)))
    served.start()
    try:
        body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "hold"}
        bisect_id = served.post(body).json()["id"]
        wait_until(lambda: any(started.iterdir()), "the step's test to start")
        assert served.process is not None
        processes = descendants(served.process.pid)
        test_pid = int(next(started.iterdir()).name)
        assert test_pid in processes  # the collection sees the step's test, so it sees the workers above it

        with contextlib.ExitStack() as stack:
            if stalled_client:
                client = stack.enter_context(socket.create_connection(("127.0.0.1", served.port)))
                client.sendall(STALLED_REQUEST)
                time.sleep(0.5)  # for the server to read the headers: a stop before that finds no request in flight
            served.process.send_signal(signum)
            served.process.wait(timeout=DONE_TIMEOUT_S)
        assert served.process.stderr is not None
        err = served.process.stderr.read()
    finally:
        served.stop()

    assert served.process.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"bisect serve: stopped by {signum.name}; 1 running step(s) stored as interrupted; the next `bisect serve` "
        "over this store resumes their jobs"
    )
    wait_until(lambda: not any(running(pid) for pid in processes), "the server's processes to end")
    with sqlite3.connect(db) as conn:
        steps = conn.execute("select verdict, error_kind from steps where bisect_id = ?", (bisect_id,)).fetchall()
        job = conn.execute("select state from jobs where bisect_id = ?", (bisect_id,)).fetchone()
    assert steps == [("error", "interrupted")]
    assert job == ("running",)  # the next server resumes it


def test_a_stop_ends_the_mirror_fetch_a_submission_waits_on_and_leaves_no_git_process(tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 4, 2)
    gate, started = tmp_path / "gate", tmp_path / "upload-pack.pid"
    (tmp_path / "upload-pack.sh").write_text(SLOW_UPLOAD_PACK)
    env = service_env(**service_home(tmp_path), GATE=str(gate), STARTED=str(started), GIT_CONFIG_COUNT="1",
                      GIT_CONFIG_KEY_0="remote.origin.uploadpack",
                      GIT_CONFIG_VALUE_0=f"sh {tmp_path / 'upload-pack.sh'}")  # fmt: skip
    args = ["--db", f"sqlite:///{tmp_path / 'bisect.db'}", "--allow-repo", str(history.path), "--allow-commands"]
    served = ServiceProcess(args, env)
    served.start()  # its first fetch is quick: the gate is not there yet
    answers: list[httpx.Response | httpx.TransportError] = []

    def submit() -> None:
        body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "run": "true"}
        try:
            answers.append(served.post(body))
        except httpx.TransportError as exc:
            answers.append(exc)

    submission = threading.Thread(target=submit)
    try:
        gate.touch()
        submission.start()
        wait_until(
            lambda: started.exists() and started.read_text().strip(), "the submission's fetch to reach the remote"
        )
        assert served.process is not None
        processes = descendants(served.process.pid)
        assert int(started.read_text()) in processes  # the fetch's remote side, a child of the server's git

        served.process.send_signal(signal.SIGTERM)
        served.process.wait(timeout=DONE_TIMEOUT_S)
        assert served.process.stderr is not None
        err = served.process.stderr.read()
        submission.join()
        wait_until(lambda: not any(running(pid) for pid in processes), "the fetch's processes to end")
    finally:
        gate.unlink(missing_ok=True)  # only now could a fetch left behind end by itself
        served.stop()

    assert served.process.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    [answer] = answers  # the submission is answered before the server goes: its fetch was stopped
    assert isinstance(answer, httpx.Response), answer
    assert answer.status_code == 400
    assert answer.json()["detail"].endswith("stopped: the server is stopping")
