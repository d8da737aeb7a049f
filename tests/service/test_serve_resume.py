"""A served bisect paused on a failing harness (a full disk, three times in a row) resumed on a real `bisect serve`:
`bisect resume --server URL ID` (its owner's or an admin's token) has the server run it again to its culprit, and the
status, the report and a mark's answer over the server advise that command, with the flags they were given, and the
JSON report says so with its `resume` key, never a local `bisect resume` the server's store would need."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_process import DONE_TIMEOUT_S, ServiceProcess, running_service, service_env, service_home
from synthetic import SyntheticHistory, culprit_history

from bisector.dashboard.actions import BAD_CSRF

pytestmark = pytest.mark.xdist_group("service")

ALICE, BOB = "alice-token-1", "bob-token-2"
TOKENS = f'alice = "{ALICE}"\nbob = "{BOB}"\n'
# While the file $FULL exists, every step fails as on a full disk: the harness's fault, never the commit's.
RECIPE = """[recipes.disk]
run = 'if [ -e "$FULL" ]; then echo "No space left on device" >&2; exit 1; fi; bash test.sh'
env = { FULL = "FULL_PATH" }
"""


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> SyntheticHistory:
    return culprit_history(tmp_path_factory.mktemp("hist") / "repo", 12, 7, sleep_s=0.05)


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("disk") / "full"


@pytest.fixture(scope="module")
def service(
    history: SyntheticHistory, full_disk: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    home = tmp_path_factory.mktemp("home")
    (home / "serve.toml").write_text(RECIPE.replace("FULL_PATH", str(full_disk)))
    (home / "tokens.toml").write_text(TOKENS)
    args = ["--db", f"sqlite:///{home / 'bisect.db'}", "--allow-repo", str(history.path), "--config",
            str(home / "serve.toml"), "--tokens-file", str(home / "tokens.toml")]  # fmt: skip
    with running_service(*args, **service_home(home), BISECT_TOKEN="") as served:
        served.home_env = service_home(home)  # type: ignore[attr-defined]
        served.db = str(home / "bisect.db")  # type: ignore[attr-defined]
        yield served


def bisect_cli(service: ServiceProcess, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**service_env(**service.home_env), "BISECT_TOKEN": token}  # type: ignore[attr-defined]
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_a_bisect_paused_on_a_full_disk_is_resumed_over_the_server(
    service: ServiceProcess, history: SyntheticHistory, full_disk: Path
) -> None:
    full_disk.touch()
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "disk", "explain": False}
    submitted = httpx.post(
        f"{service.base}/api/bisects", json=body, headers={"Authorization": f"Bearer {ALICE}"}, timeout=120.0
    )
    bisect_id = submitted.json()["id"]
    assert service.wait_done(bisect_id)["status"] == "paused"
    status = bisect_cli(service, ALICE, "status", str(bisect_id), "--server", service.base)
    assert f"none is running it; `bisect resume --server {service.base} {bisect_id}` continues" in status.stdout
    assert status.stdout.count("bisect resume") == 1, status.stdout  # the stored words name no command
    assert status.stdout.endswith(f"the whole report: bisect report --server {service.base} {bisect_id}\n")
    report = bisect_cli(service, ALICE, "report", str(bisect_id), "--server", service.base)
    assert f"resume with: bisect resume --server {service.base} {bisect_id} " in report.stdout, report.stdout
    assert report.stdout.count("bisect resume") == 1
    as_json = json.loads(bisect_cli(service, ALICE, "report", str(bisect_id), "--server", service.base,
                                    "--format", "json").stdout)  # fmt: skip
    assert as_json["resume"] == {"reason": "paused", "served": True}
    assert "bisect resume" not in json.dumps(as_json)
    plain = httpx.get(f"{service.base}/api/bisects/{bisect_id}/rendered", params={"view": "status"}, timeout=60.0)
    assert f"`bisect resume --server {service.base} {bisect_id}` continues" in plain.text  # a reader without flags

    refused = bisect_cli(service, BOB, "resume", str(bisect_id), "--server", service.base)
    assert (refused.returncode, refused.stderr) == (
        2, f"bisect: error: {service.base}: 403 bob may not resume bisect {bisect_id}: it is alice's; only its owner "
        "or an admin may\n",
    )  # fmt: skip
    moved = bisect_cli(service, ALICE, "resume", str(bisect_id), "--server", service.base, "--workers", "2")
    assert (moved.returncode, moved.stderr) == (
        2, "bisect: error: --workers: with --server the server runs the bisect as it was submitted\n",
    )  # fmt: skip
    assert service.job(bisect_id)["state"] == "done"  # neither resumed it
    token_file = full_disk.parent / "alice.token"
    token_file.write_text(ALICE)
    marked = bisect_cli(service, "", "mark", str(bisect_id), history.shas[1], "good", "--server", service.base,
                        "--token-file", str(token_file))  # fmt: skip
    assert marked.stdout.endswith(
        f"; bisect {bisect_id} is paused: resuming it on this server takes the verdict in: `bisect resume --server "
        f"{service.base} --token-file {token_file} {bisect_id}`\n"
    ), marked.stderr

    full_disk.unlink()
    resumed = bisect_cli(service, ALICE, "resume", str(bisect_id), "--server", service.base)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(f"bisect {bisect_id}: resumed; its job is ")
    report_json = service.wait_done(bisect_id)
    assert (report_json["status"], report_json["first_bad"]["sha"]) == ("found", history.shas[history.first_bad])

    again = bisect_cli(service, ALICE, "resume", str(bisect_id), "--server", service.base)
    assert (again.returncode, again.stderr) == (
        2, f"bisect: error: {service.base}: 409 bisect {bisect_id} is already found; nothing to resume\n",
    )  # fmt: skip


def test_the_dashboard_page_of_a_paused_bisect_resumes_it_through_its_guarded_form(
    service: ServiceProcess, history: SyntheticHistory, full_disk: Path
) -> None:
    """The page gives the command that reaches this server and, to its owner logged in, a Resume form that the
    same guards as the page's other forms keep (Origin, the session's CSRF token)."""
    full_disk.touch()
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "disk", "explain": False}
    bisect_id = service.post(body, authorization=f"Bearer {ALICE}").json()["id"]
    assert service.wait_done(bisect_id)["status"] == "paused"
    anonymous = httpx.get(f"{service.base}/bisects/{bisect_id}", timeout=60.0).text
    assert f'<code id="resume-command">bisect resume --server {service.base} {bisect_id}</code>' in anonymous
    assert 'id="resume-form"' not in anonymous
    assert "to cancel, resume, rerun a step or mark a commit" in anonymous

    with httpx.Client(base_url=service.base, timeout=60.0) as browser:
        login = browser.post("/login", data={"token": ALICE}, headers={"Origin": service.base})
        assert login.status_code == 303, login.text
        page = browser.get(f"/bisects/{bisect_id}").text
        form = re.search(rf'<form id="resume-form" method="post" action="/bisects/{bisect_id}/resume">'
                         r'<input type="hidden" name="csrf" value="([0-9a-f]{64})">', page)  # fmt: skip
        assert form is not None, page
        forged = browser.post(f"/bisects/{bisect_id}/resume", data={"csrf": "0" * 64}, headers={"Origin": service.base})
        assert (forged.status_code, forged.text) == (403, f"403: {BAD_CSRF}\n")
        assert service.job(bisect_id)["state"] == "done"  # not resumed
        full_disk.unlink()
        resumed = browser.post(f"/bisects/{bisect_id}/resume", data={"csrf": form.group(1)},
                               headers={"Origin": service.base})  # fmt: skip
        assert (resumed.status_code, resumed.headers["location"]) == (303, f"/bisects/{bisect_id}")
    report = service.wait_done(bisect_id)
    assert (report["status"], report["first_bad"]["sha"], report["resume"]) == (
        "found", history.shas[history.first_bad], None,
    )  # fmt: skip


def test_a_local_mark_on_the_servers_store_advises_resuming_a_served_bisect_on_its_server(
    service: ServiceProcess, history: SyntheticHistory, full_disk: Path
) -> None:
    """`bisect mark --db` on the server's store (a reader of the store: it knows no address of the server) of a
    paused served bisect names the resume that reaches the server, never a local `bisect resume ID`."""
    full_disk.touch()
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "disk", "explain": False}
    bisect_id = service.post(body, authorization=f"Bearer {ALICE}").json()["id"]
    assert service.wait_done(bisect_id)["status"] == "paused"
    full_disk.unlink()
    db = service.db  # type: ignore[attr-defined]
    marked = bisect_cli(service, "", "mark", str(bisect_id), history.shas[1], "good", "--db", db)
    assert marked.returncode == 0, marked.stderr
    assert marked.stdout.endswith(
        f"; bisect {bisect_id} is paused: no coordinator runs it; `bisect resume --server URL {bisect_id}` takes the "
        "verdict in\n"
    ), marked.stdout


def test_a_served_bisects_rerun_line_names_its_server_and_runs_there(
    service: ServiceProcess, history: SyntheticHistory, full_disk: Path
) -> None:
    """The report's line that reruns the culprit through gpu-bisect, and the JSON report's `rerun`, name the bisect's
    server: with the flags of a reader over `--server` (and that line has the server rerun it), `--server URL` for a
    reader of the server's store; never the local `run-at`, which would run it on the reader's machine."""
    full_disk.unlink(missing_ok=True)
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "disk", "explain": False}
    bisect_id = service.post(body, authorization=f"Bearer {ALICE}").json()["id"]
    assert service.wait_done(bisect_id)["status"] == "found"
    culprit = history.shas[history.first_bad][:12]
    remote = f"bisect run-at --server {service.base} --bisect {bisect_id} {culprit}"
    local = f"bisect run-at --server URL --bisect {bisect_id} {culprit}"
    for reader, line in ((["--server", service.base], remote), (["--db", service.db], local)):  # type: ignore[attr-defined]
        text = bisect_cli(service, ALICE, "report", str(bisect_id), *reader).stdout
        assert f"through gpu-bisect (its image, where the bisect used images):\n  {line}\n" in text, text
        markdown = bisect_cli(service, ALICE, "report", str(bisect_id), *reader, "--format", "markdown").stdout
        assert f"```sh\n{line}\n```" in markdown, markdown
        as_json = json.loads(bisect_cli(service, ALICE, "report", str(bisect_id), *reader, "--format", "json").stdout)
        assert as_json["rerun"] == line

    started = bisect_cli(service, ALICE, *remote.split()[1:])
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith(f"bisect {bisect_id}: rerun at {culprit} started"), started.stdout

    def reruns() -> list[str]:
        return [s["verdict"] for s in service.report(bisect_id)["steps"] if s["purpose"] == "rerun"]

    deadline = time.monotonic() + DONE_TIMEOUT_S
    while (seen := reruns()) != ["bad"]:
        assert seen in ([], ["running"]), seen
        assert time.monotonic() < deadline, "the server never ran the rerun"
        time.sleep(0.2)
