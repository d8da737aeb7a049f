"""The dashboard served by a real uvicorn process over real stores, talked to with httpx."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from bisect_helpers import run_cli, synthetic_spec
from click.testing import CliRunner
from fill import Filled
from server import dashboard_command, dashboard_env, running_dashboard
from synthetic import culprit_history

from bisector.cli import main
from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.report import BisectReport, report_json
from bisector.runner.coordinator import Coordinator, prepare_bisect
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus


@pytest.fixture(scope="module")
def base(store_url: str, filled: Filled) -> Iterator[str]:
    with running_dashboard(store_url, filled.log_dir) as url:
        yield url


def get(base: str, path: str, **kwargs) -> httpx.Response:
    return httpx.get(base + path, timeout=60.0, **kwargs)


def test_by_default_the_store_s_own_logs_are_served(store_url: str, filled: Filled) -> None:
    """Without --log-dir the dashboard serves the store's log folder in the data dir: the one the coordinator
    wrote, found through the store's identity however the dashboard opened the store."""
    data_dir = filled.log_dir.parent
    with running_dashboard(store_url, None, BISECT_DATA_DIR=str(data_dir)) as url:
        steps = get(url, f"/api/bisects/{filled.found_id}/steps").json()["steps"]
        first = steps[0]
        assert first["log_url"] is not None
        assert f"metric: {10.0 if first['verdict'] == 'good' else 5.0}" in first["log_tail"]
        assert get(url, first["log_url"]).text == Path(first["log_path"]).read_text()


def test_api_list_matches_the_cli(base: str, store_url: str, filled: Filled):
    for query, flags in [("", []), ("?status=found&metric=exit", ["--status", "found", "--metric", "exit"])]:
        cli = CliRunner().invoke(main, ["list", "--format", "json", *flags], env={"BISECT_DB": store_url})
        response = get(base, "/api/bisects" + query)
        assert response.status_code == 200
        assert response.json() == json.loads(cli.stdout)
    assert [b["id"] for b in get(base, "/api/bisects?culprit=%233007").json()] == [filled.exit_code_id, filled.found_id]


def test_api_bisect_is_the_report_and_steps_have_logs(base: str, store_url: str, filled: Filled):
    with Store.open(store_url) as store:
        report = report_json(BisectReport.load(store, filled.found_id))
    assert get(base, f"/api/bisects/{filled.found_id}").json() == report
    steps = get(base, f"/api/bisects/{filled.found_id}/steps").json()
    assert steps["status"] == "found"
    assert steps["progress"] == {"steps": len(report["steps"]), "finished": len(report["steps"]), "running": 0}
    first = steps["steps"][0]
    assert first["log_url"].startswith("/logs/")
    assert first["log_url"].endswith(f"/bisect-{filled.found_id}/{Path(first['log_path']).name}")
    assert f"metric: {10.0 if first['verdict'] == 'good' else 5.0}" in first["log_tail"]
    assert get(base, first["log_url"]).text == Path(first["log_path"]).read_text()


def test_api_stats_and_openapi(base: str, filled: Filled):
    stats = get(base, "/api/stats").json()
    assert sum(g["bisects"] for g in stats["groups"]) == 3
    assert get(base, f"/api/stats?repo={filled.table_repo}").json()["groups"][0]["repo"] == str(filled.table_repo)
    paths = get(base, "/api/openapi.json").json()["paths"]
    assert {"/api/bisects", "/api/bisects/{bisect_id}", "/api/bisects/{bisect_id}/steps", "/api/stats"} <= set(paths)
    assert all(set(operations) == {"get"} for operations in paths.values())


def test_bisect_page_plots_the_report(base: str, filled: Filled):
    page = get(base, f"/bisects/{filled.found_id}").text
    report = get(base, f"/api/bisects/{filled.found_id}").json()
    boundary = re.search(r'id="boundary" class="boundary" data-last-good="(\d+)" data-first-bad="(\d+)"', page)
    assert boundary is not None
    assert (int(boundary[1]), int(boundary[2])) == (report["last_good"]["position"], report["first_bad"]["position"])
    points = re.findall(r'data-position="(\d+)"\s+data-verdict="(\w+)" data-sha="(\w+)" data-value="([0-9.]+)"', page)
    expected = {
        (s["position"], s["verdict"], s["sha"], float(v))
        for s in report["steps"]
        if s["purpose"] in ("search", "confirm")
        for v in s["samples"]
    }
    assert {(int(p), v, sha, float(x)) for p, v, sha, x in points} == expected
    assert 'data-threshold="8.0"' in page
    assert report["reproduce"].split()[0] in page
    assert "tuning.py" in page
    # the table row no traced run could check is shown as a static lead, with the same evidence as the JSON
    static = report["explanation"]["static"]["findings"]
    assert [(row["name"], row["evidence"]) for row in static] == [("BLOCK", "static")]
    assert '<td class="evidence">static lead</td><td>table_entry</td><td>tuning.py</td><td>BLOCK</td>' in page


def test_bisect_page_names_its_rule_and_numbers_steps_as_the_report_does(base: str, filled: Filled):
    """The "judged by" line names the expectation (or the exit code) and the command; steps are numbered 1..N as
    `bisect report` and `bisect rerun --step N` number them, not by their ids in the store."""
    for bisect_id, rule in ((filled.found_id, "&gt;= 8"), (filled.exit_code_id, "exit code")):
        page = get(base, f"/bisects/{bisect_id}").text
        assert f"<dt>judged by</dt><dd><code>{rule}</code> on <code>bash test.sh</code></dd>" in page
        steps = get(base, f"/api/bisects/{bisect_id}").json()["steps"]
        rows = [(int(a), int(b)) for a, b in re.findall(r'<tr data-step="(\d+)">\s*<td>(\d+)</td>', page)]
        assert rows == [(n, n) for n in range(1, len(steps) + 1)]
        assert [s["number"] for s in steps] == [n for n, _ in rows]


def test_commit_dates_are_author_dates_in_every_rendering(base: str, store_url: str, filled: Filled):
    """The date beside a commit's author is its author date, as `git log` shows, not its committer date."""
    culprit = filled.table_shas[filled.table_culprit]

    def date(field: str) -> datetime:
        shown = subprocess.run(
            ["git", "log", "-1", f"--format={field}", culprit], cwd=filled.table_repo, capture_output=True, text=True
        )
        return datetime.fromtimestamp(int(shown.stdout), UTC)

    authored, committed = date("%at"), date("%ct")
    assert authored != committed
    as_shown = authored.strftime("%Y-%m-%d %H:%M UTC")
    report = get(base, f"/api/bisects/{filled.found_id}").json()
    assert report["first_bad"]["sha"] == culprit
    assert datetime.fromisoformat(report["first_bad"]["date"]) == authored
    assert f'<span id="first-bad-date">{as_shown}</span>' in get(base, f"/bisects/{filled.found_id}").text
    for output_format in ("text", "markdown"):
        done = CliRunner().invoke(
            main, ["report", str(filled.found_id), "--format", output_format], env={"BISECT_DB": store_url}
        )
        assert as_shown in done.stdout
        assert committed.strftime("%Y-%m-%d %H:%M UTC") not in done.stdout


def test_list_and_stats_pages(base: str, filled: Filled):
    page = get(base, "/?status=ambiguous").text
    last_good, first_bad = filled.ambiguous_range
    assert f"range {last_good[:10]}..{first_bad[:10]}" in page
    assert f'href="/bisects/{filled.ambiguous_id}"' in page
    assert f'href="/bisects/{filled.found_id}"' not in page
    assert "<th>created (UTC)</th>" in page  # the times are UTC's, as the report says
    stats = get(base, "/stats").text
    assert "tuning.py" in stats
    assert 'data-count="3"' in stats


BAD_REQUESTS = [
    "/api/bisects?limit=0",
    "/api/bisects?limit=abc",
    "/api/bisects?limit=1001",
    "/api/bisects?status=done",
    "/api/bisects?culprit=xyz",
    "/api/bisects?since=yesterday",
    "/api/bisects?since=2026-02-30",
    "/api/bisects?repo=" + "r" * 300,
    "/api/bisects/0",
    "/api/bisects/-1",
    "/api/bisects/abc",
    "/api/bisects/99999999999",
    "/api/bisects/99999",
    "/api/bisects/99999/steps",
    "/api/stats?since=13d7",
    "/bisects/abc",
    "/bisects/99999",
    "/?limit=-5",
    "/stats?since=x",
    "/logs/%2e%2e/bisect.db",
    "/logs/bisect-1/..%2f..%2fbisect.db",
    "/logs//etc/passwd",
    "/logs/%2Fetc%2Fpasswd",
    "/logs/nope.log",
    "/logs/bisect-1/%00",
]


@pytest.mark.parametrize("path", BAD_REQUESTS)
def test_bad_requests_get_a_clear_4xx(base: str, path: str):
    response = get(base, path)
    assert 400 <= response.status_code < 500, response.text
    assert "Traceback" not in response.text
    detail = response.json()["detail"] if path.startswith(("/api/", "/logs/")) else response.text
    assert isinstance(detail, str)
    assert 0 < len(detail) < 400


def test_a_symlink_out_of_the_log_folder_is_refused(base: str, filled: Filled, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not a log")
    link = filled.log_dir / "escape.log"
    link.symlink_to(secret)
    try:
        response = get(base, "/logs/escape.log")
    finally:
        link.unlink()
    assert response.status_code == 403
    assert "not a log" not in response.text


def test_no_endpoint_writes(base: str, filled: Filled):
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        response = httpx.request(method, f"{base}/api/bisects/{filled.found_id}", timeout=60.0)
        assert response.status_code == 405


def test_other_addresses_need_a_token(store_url: str, filled: Filled, tmp_path: Path):
    if not store_url.startswith("sqlite"):
        pytest.skip("the token rule does not depend on the backend")
    refused = subprocess.run(
        [*dashboard_command("--host", "0.0.0.0", "--port", "1", "--db", store_url)],
        env=dashboard_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert refused.stderr.startswith("bisect: error: --host 0.0.0.0 is reachable from other machines")
    assert len(refused.stderr.strip().splitlines()) == 1
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    with running_dashboard(store_url, filled.log_dir, "--token-file", str(token_file)) as url:
        missing, wrong = get(url, "/api/bisects"), get(url, "/api/bisects", headers={"Authorization": "Bearer wrong"})
        assert (missing.status_code, wrong.status_code) == (401, 401)
        assert missing.json()["detail"].startswith("no token given: ")
        assert wrong.json()["detail"].startswith("token not accepted: ")
        assert get(url, "/api/bisects", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
        with httpx.Client(base_url=url, timeout=60.0) as browser:
            assert browser.get("/?token=s3cret-token").status_code == 200
            assert browser.get(f"/bisects/{filled.found_id}").status_code == 200  # the cookie it set
    people = tmp_path / "tokens.toml"
    people.write_text('admins = ["ann"]\nann = "ann-token"\nben = "ben-token"\n')
    with running_dashboard(store_url, filled.log_dir, "--tokens-file", str(people), BISECT_TOKEN="unused") as url:
        for token in ("ann-token", "ben-token"):  # any person's token reads
            assert get(url, "/api/bisects", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        for token in ("unused", "s3cret-token"):
            assert get(url, "/api/bisects", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    with running_dashboard(store_url, filled.log_dir, BISECT_TOKEN="from-env") as url:
        assert get(url, "/stats").status_code == 401
        assert get(url, "/stats", headers={"Authorization": "Bearer from-env"}).status_code == 200
    assert os.environ.get("BISECT_TOKEN") is None


def test_a_taken_port_is_one_line_before_anything_is_served(store_url: str, filled: Filled, tmp_path: Path):
    if not store_url.startswith("sqlite"):
        pytest.skip("binding does not depend on the backend")
    fresh = tmp_path / "fresh.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = subprocess.run(
            dashboard_command("--port", str(port), "--db", str(fresh), "--log-dir", str(tmp_path)),
            env=dashboard_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert refused.returncode == 2
    assert refused.stderr == f"bisect: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert not fresh.exists(), "the store was opened before the port was known to be free"


def test_the_list_shows_an_ad_hoc_runs_outcome_not_failed(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 4, 2)
    db = tmp_path / "b.db"
    metric = ["--metric", r"metric: ([0-9.]+)", "--expect", ">= 8"]
    ran = run_cli("run-at", "main", "--repo", str(history.path), "--run", "bash test.sh", *metric,
                  "--image", "none", "--executor", "inprocess", db=db)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    with running_dashboard(f"sqlite:///{db}", tmp_path / "logs") as url:
        page = httpx.get(f"{url}/", timeout=60.0).text
    assert ">adhoc bad</td>" in page
    assert ">failed</td>" not in page


def test_a_paused_bisect_s_page_says_how_its_reader_resumes_it(tmp_path: Path) -> None:
    """The read-only dashboard has no Resume button: it gives the command, the local one for a local bisect, the
    one to the server that runs it for a served one."""
    history = culprit_history(tmp_path / "repo", 4, 2)
    db = tmp_path / "b.db"
    spec = BisectSpec.from_options({"repo": str(history.path), "good": history.shas[0], "bad": "main", "run": "true"})
    with Store.open(f"sqlite:///{db}") as store:
        local, served = prepare_bisect(store, spec), prepare_bisect(store, spec, extra={"source": "/srv/repo"})
        for bisect_id in (local, served):
            store.set_status(bisect_id, BisectStatus.PAUSED, message="paused: ...; fix it, then resume the bisect")
    with running_dashboard(f"sqlite:///{db}", tmp_path / "logs") as url:
        pages = [get(url, f"/bisects/{bisect_id}").text for bisect_id in (local, served)]
    assert f'<code id="resume-command">bisect resume {local}</code>' in pages[0]
    assert f'<code id="resume-command">bisect resume --server URL {served}</code>' in pages[1]
    assert all('id="resume-form"' not in page for page in pages)


def test_the_steps_a_page_polls_run_no_git(store_url: str, filled: Filled, tmp_path: Path) -> None:
    """A running bisect's page asks for its steps every 2 s: that answer runs no git process (the report's
    reproduce line does: it looks for the commit's .gitmodules)."""
    calls = tmp_path / "git-calls"
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    real_git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real_git.strip()} "$@"\n')
    wrapper.chmod(0o755)
    path = f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}"
    with running_dashboard(store_url, filled.log_dir, PATH=path) as url:
        assert get(url, f"/api/bisects/{filled.found_id}/steps").json()["steps"]
        assert repository_calls(calls) == []
        assert get(url, f"/api/bisects/{filled.found_id}").json()["reproduce"]
        assert repository_calls(calls) != []  # the wrapper is the git the dashboard runs


def repository_calls(calls: Path) -> list[str]:
    """The git commands the wrapper ran in a repository (not GitPython's `git version` at its import)."""
    return [line for line in calls.read_text().splitlines() if line.startswith("-C")] if calls.exists() else []


def test_the_bisect_page_names_the_answer_and_the_verdicts_in_the_bisect_s_terms(tmp_path: Path) -> None:
    """A bisect run with --term-old fast --term-new slow: its page called the culprit the "first bad commit" beside
    its own message `first slow commit: ...` and the reports' words."""
    history = culprit_history(tmp_path / "repo", 12, 7)
    db = tmp_path / "b.db"
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], term_old="fast", term_new="slow")
    with Store.open(f"sqlite:///{db}") as store:
        record = Coordinator(store, make_executor, poll_interval_s=0.05).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[7])
    with running_dashboard(f"sqlite:///{db}", tmp_path / "logs") as url:
        page = get(url, f"/bisects/{record.id}").text
    summary = page.split('<dl class="summary">', 1)[1].split("</dl>", 1)[0]
    assert "<dt>first slow commit</dt>" in summary
    assert "<dt>last fast commit</dt>" in summary
    assert "bad commit" not in summary
    assert "good commit" not in summary
    steps = page.split('<table id="steps"', 1)[1]
    shown = re.findall(r'<td class="verdict (\w+)">(\w+)</td>', steps)
    assert shown
    assert {(stored, {"good": "fast", "bad": "slow"}[stored]) for stored, _ in shown} == set(shown)
