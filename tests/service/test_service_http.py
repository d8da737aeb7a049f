"""`bisect serve` on loopback with a real HTTP client: jobs run to the end on local workers, several at once;
tokens and the command policy guard the write endpoints; cancel; the CLI client prints what a local store would."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from service_process import DONE_TIMEOUT_S, TOKEN, ServiceProcess, running_service, service_env, service_home
from synthetic import SyntheticHistory, culprit_history

from bisector.vocab.domain import RERUN_STOP_WAIT_S

pytestmark = pytest.mark.xdist_group("service")
EXIT_NO_CULPRIT = 3

CONFIG = """
[recipes.synthetic]
run = "bash test.sh"
explain = false

[recipes.slow]
run = "bash test.sh"
env = { SYNTHETIC_SLEEP_S = "60" }

[recipes.held]
run = 'while [ -e "$HOLD" ]; do sleep 0.05; done; bash test.sh'
env = { HOLD = "HOLD_PATH" }
"""


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> SyntheticHistory:
    return culprit_history(tmp_path_factory.mktemp("hist") / "repo", 24, 15, sleep_s=0.05)


@pytest.fixture(scope="module")
def hold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """While this file exists, the steps of the recipe `held` wait."""
    return tmp_path_factory.mktemp("hold") / "hold"


@pytest.fixture(scope="module")
def service(
    history: SyntheticHistory, tmp_path_factory: pytest.TempPathFactory, module_store_url: str, hold: Path
) -> Iterator[ServiceProcess]:
    home = tmp_path_factory.mktemp("home")
    config = home / "serve.toml"
    config.write_text(CONFIG.replace("explain = false\n", "").replace("HOLD_PATH", str(hold)))
    env = service_home(home)
    args = ["--db", module_store_url, "--allow-repo", str(history.path), "--config", str(config), "--slots", "2"]
    with running_service(*args, **env) as served:
        served.db = module_store_url  # type: ignore[attr-defined]
        served.home_env = env  # type: ignore[attr-defined]
        yield served


def submission(history: SyntheticHistory, **extra: object) -> dict[str, object]:
    return {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "synthetic",
            "explain": False, **extra}  # fmt: skip


def test_a_submitted_job_runs_to_the_end_and_names_the_culprit(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    answer = service.post(submission(history))
    assert answer.status_code == 201
    assert answer.json()["status"] == "queued"
    assert answer.json()["owner"] == service.job(answer.json()["id"])["owner"] == "default"  # the one token's name
    report = service.wait_done(answer.json()["id"])
    assert report["status"] == "found"
    assert report["first_bad"]["sha"] == history.shas[history.first_bad]


def test_concurrent_submissions_all_run_with_the_right_culprit(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    with ThreadPoolExecutor(5) as threads:
        answers = list(threads.map(lambda _: service.post(submission(history)), range(5)))
    assert [a.status_code for a in answers] == [201] * 5, [a.text for a in answers]
    ids = [a.json()["id"] for a in answers]
    assert len(set(ids)) == 5
    for bisect_id in ids:
        report = service.wait_done(bisect_id)
        assert report["first_bad"]["sha"] == history.shas[history.first_bad]


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", "Basic dGVzdDp0ZXN0", f"Bearer {TOKEN}x"])
def test_writes_without_the_right_token_get_401(
    service: ServiceProcess, history: SyntheticHistory, authorization: str | None
) -> None:
    before = service.count()
    answer = service.post(submission(history), authorization=authorization)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert service.delete(1, authorization=authorization).status_code == 401
    assert service.count() == before  # nothing was queued


def test_a_free_form_command_is_refused_without_allow_commands(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "run": "rm -rf ~"}
    answer = service.post(body)
    assert answer.status_code == 403
    assert "--allow-commands" in answer.json()["detail"]
    env_answer = service.post(submission(history, env={"BASH_ENV": "/tmp/x"}))
    assert env_answer.status_code == 403


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"repo": "/elsewhere"}, "not served here"),
        ({"recipe": "nope"}, "unknown recipe"),
        ({"bad": "no-such-ref"}, "unknown revision"),
        ({"surprise": 1}, "unknown key"),
    ],
)
def test_bad_requests_get_one_line_400(
    service: ServiceProcess, history: SyntheticHistory, change: dict[str, object], words: str
) -> None:
    answer = service.post({**submission(history), **change})
    assert answer.status_code == 400
    assert words in answer.json()["detail"]


def test_delete_cancels_a_running_job(service: ServiceProcess, history: SyntheticHistory) -> None:
    bisect_id = service.post(submission(history, recipe="slow")).json()["id"]
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while service.job(bisect_id)["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert service.delete(bisect_id).status_code == 200
    assert service.wait_done(bisect_id)["status"] == "cancelled"
    assert service.delete(bisect_id).status_code == 409
    assert service.delete(999999).status_code == 404


def bisect_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_cli_client_submits_and_prints_as_for_a_local_store(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    env = service_env(**service.home_env)  # type: ignore[attr-defined]
    submitted = bisect_cli(
        "submit", "--server", service.base, "--repo", str(history.path), "--good", history.shas[0], "--bad", "main",
        "--recipe", "synthetic", "--no-explain", "--format", "json", env=env,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    answer = json.loads(submitted.stdout)
    assert answer["status"] == "queued"
    service.wait_done(answer["id"])
    local_hint = f"the whole report: bisect report {answer['id']}"
    remote_hint = f"the whole report: bisect report --server {service.base} {answer['id']}"

    def over_the_server(local: str) -> str:
        """Output read from the store as the server gives it: the commands that name the server (the status's last
        line; the report's rerun, which goes to the server either way: `--server URL` for the store's reader) name
        it as the client's flags do, so that they work here."""
        return local.replace(local_hint, remote_hint).replace("run-at --server URL", f"run-at --server {service.base}")

    for command in (["status"], ["report"], ["report", "--format", "json"], ["status", "--format", "markdown"]):
        remote = bisect_cli(*command, str(answer["id"]), "--server", service.base, env=env)
        local = bisect_cli(*command, str(answer["id"]), "--db", service.db, env=env)  # type: ignore[attr-defined]
        assert remote.returncode == local.returncode == 0, remote.stderr
        assert remote.stdout == over_the_server(local.stdout)
        assert (remote_hint in remote.stdout) == (command[0] == "status")
    hinted = bisect_cli(*shlex.split(remote_hint.removeprefix("the whole report: bisect ")), env=env)
    assert hinted.returncode == 0, hinted.stderr
    local_report = bisect_cli("report", str(answer["id"]), "--db", service.db, env=env)  # type: ignore[attr-defined]
    assert hinted.stdout == over_the_server(local_report.stdout)


def test_the_cli_client_cancels_and_says_so_in_one_line(service: ServiceProcess, history: SyntheticHistory) -> None:
    env = service_env(**service.home_env)  # type: ignore[attr-defined]
    bisect_id = service.post(submission(history, recipe="slow")).json()["id"]
    cancelled = bisect_cli("cancel", str(bisect_id), "--server", service.base, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"bisect {bisect_id}: cancelled"
    again = bisect_cli("cancel", str(bisect_id), "--server", service.base, env=env)
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1
    assert "already cancelled" in again.stderr
    no_token = bisect_cli("cancel", str(bisect_id), "--server", service.base, env={**env, "BISECT_TOKEN": ""})
    assert no_token.returncode == 2
    assert "401" in no_token.stderr
    assert TOKEN not in no_token.stderr


def test_a_wait_over_the_servers_most_is_refused_stating_it_and_the_cli_asks_that(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    env = service_env(**service.home_env)  # type: ignore[attr-defined]
    bisect_id = service.post(submission(history, recipe="slow")).json()["id"]
    refused = service.delete(bisect_id, wait_s=RERUN_STOP_WAIT_S + 1)
    assert (refused.status_code, refused.json()["max_wait_s"]) == (422, RERUN_STOP_WAIT_S)
    assert refused.json()["detail"] == f"wait_s: at most {RERUN_STOP_WAIT_S:g} seconds on this server"
    assert service.job(bisect_id)["state"] != "done"  # refused before anything was cancelled
    cancelled = bisect_cli("cancel", str(bisect_id), "--server", service.base, "--wait", "1000", env=env)
    capped = f"bisect: --wait 1000 capped at {RERUN_STOP_WAIT_S:g} s, the most {service.base} waits for reruns\n"
    assert (cancelled.returncode, cancelled.stdout, cancelled.stderr) == (0, f"bisect {bisect_id}: cancelled\n", capped)
    assert service.wait_done(bisect_id)["status"] == "cancelled"


def test_a_cancel_ends_the_bisects_rerun_too_and_the_cli_says_so(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    env = service_env(**service.home_env)  # type: ignore[attr-defined]
    bisect_id = service.post(submission(history, recipe="slow")).json()["id"]
    started = bisect_cli("run-at", "--bisect", str(bisect_id), history.shas[3], "--server", service.base, env=env)
    assert started.returncode == 0, started.stderr

    def reruns() -> list[str]:
        return [s["verdict"] for s in service.report(bisect_id)["steps"] if s["purpose"] == "rerun"]

    deadline = time.monotonic() + DONE_TIMEOUT_S
    while reruns() != ["running"]:
        assert time.monotonic() < deadline, "the rerun never ran"
        time.sleep(0.1)
    cancelled = bisect_cli("cancel", str(bisect_id), "--server", service.base, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"bisect {bisect_id}: cancelled; its rerun at {history.shas[3][:12]} cancelled\n"
    assert service.wait_done(bisect_id)["status"] == "cancelled"
    while reruns() == ["running"]:
        assert time.monotonic() < deadline, "the rerun's step was not stopped"
        time.sleep(0.1)
    assert reruns() == ["cancelled"]
    assert service.delete(bisect_id).json()["detail"] == f"bisect {bisect_id} is already cancelled"


@pytest.mark.parametrize("frozen", [False, True], ids=["stopped", "asked-to-stop"])
def test_delete_stops_a_cli_rerun_of_an_ended_bisect_and_keeps_its_verdict(
    service: ServiceProcess, history: SyntheticHistory, hold: Path, frozen: bool
) -> None:
    """`bisect run-at --bisect` in a process of its own, on the server's store: DELETE reaches it as `bisect cancel`
    does (tests/test_rerun_cancel.py). One still running when the cancel stops waiting (frozen by SIGSTOP, the
    cancel not waiting) is named asked to stop, and stops once it runs again."""
    bisect_id = service.post(submission(history, recipe="held")).json()["id"]
    assert service.wait_done(bisect_id)["status"] == "found"
    sha = history.shas[3]

    def reruns() -> list[str]:
        return [s["verdict"] for s in service.report(bisect_id)["steps"] if s["purpose"] == "rerun"]

    hold.touch()
    env = service_env(**service.home_env)  # type: ignore[attr-defined]
    command = [sys.executable, "-m", "bisector", "run-at", "--bisect", str(bisect_id), sha, "--db", service.db]  # type: ignore[attr-defined]
    rerun = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + DONE_TIMEOUT_S
        while reruns() != ["running"]:
            assert rerun.poll() is None, rerun.communicate()
            assert time.monotonic() < deadline, "the rerun never ran"
            time.sleep(0.1)
        if frozen:
            os.kill(rerun.pid, signal.SIGSTOP)
        answer = service.delete(bisect_id, wait_s=0) if frozen else service.delete(bisect_id)
        assert answer.status_code == 200, answer.text
        stopped, asked = ([], [sha]) if frozen else ([sha], [])
        assert answer.json() == {
            "id": bisect_id, "status": "found", "ended_before": True, "reruns": stopped, "asked_to_stop": asked
        }  # fmt: skip
        os.kill(rerun.pid, signal.SIGCONT)
        out, err = rerun.communicate(timeout=DONE_TIMEOUT_S)
    finally:
        hold.unlink(missing_ok=True)
        if rerun.poll() is None:
            os.killpg(rerun.pid, signal.SIGKILL)
            rerun.communicate()
    assert rerun.returncode == EXIT_NO_CULPRIT, (out, err)
    assert err.strip().splitlines()[-1] == (
        f"bisect {bisect_id}: the rerun at {sha[:12]} was cancelled; 1 running step(s) stopped and stored as cancelled"
    )
    assert reruns() == ["cancelled"]
    assert service.report(bisect_id)["status"] == "found"
    assert service.delete(bisect_id).json()["detail"] == f"bisect {bisect_id} is already found"


def test_serve_refuses_to_start_without_a_token(history: SyntheticHistory, tmp_path: Path) -> None:
    env = {**service_env(), "BISECT_TOKEN": ""}
    done = bisect_cli("serve", "--allow-repo", str(history.path), "--db", str(tmp_path / "b.db"), env=env)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("bisect: error:")
    assert "token" in done.stderr


def test_a_second_server_on_a_taken_port_stops_before_touching_its_store(
    service: ServiceProcess, history: SyntheticHistory, tmp_path: Path
) -> None:
    fresh = tmp_path / "second.db"
    args = ["--port", str(service.port), "--allow-repo", str(history.path), "--db", str(fresh)]
    second = bisect_cli("serve", *args, env=service_env(**service.home_env))  # type: ignore[attr-defined]
    assert second.returncode == 2
    assert second.stderr == f"bisect: error: cannot listen on 127.0.0.1:{service.port}: Address already in use\n"
    assert not fresh.exists()
    assert httpx.get(f"{service.base}/api/bisects", timeout=60.0).status_code == 200
