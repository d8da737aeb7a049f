"""The browser's forms on a real `bisect serve`, spoken over plain HTTP: what the login sets, and each guard of a
state-changing POST (Origin or Referer, the session's CSRF token, the login) refusing on its own."""

from __future__ import annotations

import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from service_process import ServiceProcess, running_service, service_home
from synthetic import SyntheticHistory, culprit_history

from bisector.dashboard.actions import BAD_CSRF, FOREIGN_ORIGIN

pytestmark = pytest.mark.xdist_group("service")

ALICE, BOB = "alice-token-1", "bob-token-2"
CONFIG = '[recipes.slow]\nrun = "sleep 600"\n\n[recipes.synthetic]\nrun = "bash test.sh"\n'


@contextmanager
def served(home: Path) -> Iterator[ServiceProcess]:
    """`bisect serve` of a small history with alice's and bob's tokens, its store and data directory in home."""
    history = culprit_history(home / "repo", 6, 3)
    (home / "serve.toml").write_text(CONFIG)
    (home / "tokens.toml").write_text(f'alice = "{ALICE}"\nbob = "{BOB}"\n')
    args = ["--db", f"sqlite:///{home / 'bisect.db'}", "--allow-repo", str(history.path),
            "--config", str(home / "serve.toml"), "--tokens-file", str(home / "tokens.toml")]  # fmt: skip
    with running_service(*args, **service_home(home)) as service:
        service.history = history  # type: ignore[attr-defined]
        yield service


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with served(tmp_path_factory.mktemp("home")) as service:
        yield service


def logged_in(service: ServiceProcess, token: str = ALICE) -> tuple[httpx.Client, str]:
    """A client holding the cookies of a login, and the CSRF token of its pages."""
    client = httpx.Client(base_url=service.base, timeout=60.0)
    answer = client.post("/login", data={"token": token, "next": "/submit"}, headers={"Origin": service.base})
    assert answer.status_code == 303, answer.text
    page = client.get("/submit").text
    match = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert match is not None, page
    return client, match.group(1)


def running_job(service: ServiceProcess, recipe: str = "slow") -> int:
    history: SyntheticHistory = service.history  # type: ignore[attr-defined]
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": recipe, "explain": False}
    answer = service.post(body, authorization=f"Bearer {ALICE}")
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


def test_the_login_keeps_the_token_in_an_http_only_strict_cookie(service: ServiceProcess) -> None:
    answer = httpx.post(f"{service.base}/login", data={"token": ALICE}, headers={"Origin": service.base})
    assert answer.status_code == 303
    cookies = answer.headers.get_list("set-cookie")
    assert len(cookies) == 2
    for cookie in cookies:
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        assert "Secure" not in cookie  # plain http here
    wrong = httpx.post(f"{service.base}/login", data={"token": "guess-123"}, headers={"Origin": service.base})
    assert wrong.status_code == 401
    assert "token not accepted" in wrong.text
    assert "guess-123" not in wrong.text
    assert "set-cookie" not in wrong.headers


def test_over_https_the_cookies_are_secure(service: ServiceProcess) -> None:
    """Behind a TLS proxy on this host (X-Forwarded-Proto, trusted from loopback), the cookies are Secure."""
    host = service.base.removeprefix("http://")
    headers = {"Origin": f"https://{host}", "X-Forwarded-Proto": "https"}
    answer = httpx.post(f"{service.base}/login", data={"token": ALICE}, headers=headers)
    assert answer.status_code == 303
    assert all("Secure" in cookie for cookie in answer.headers.get_list("set-cookie"))


@pytest.mark.parametrize(
    ("headers", "field", "refusal"),
    [
        ({"Origin": "http://evil.example"}, "right", FOREIGN_ORIGIN),
        ({"Origin": "null"}, "right", FOREIGN_ORIGIN),
        ({"Origin": "http://127.0.0.1:1"}, "right", FOREIGN_ORIGIN),  # same site, another origin
        ({"Referer": "http://evil.example/page"}, "right", FOREIGN_ORIGIN),
        ({}, "right", FOREIGN_ORIGIN),
        ({"Origin": "same"}, "missing", BAD_CSRF),
        ({"Origin": "same"}, "wrong", BAD_CSRF),
        ({"Referer": "same"}, "wrong", BAD_CSRF),
    ],
)
def test_a_post_missing_any_guard_is_refused_and_does_nothing(
    service: ServiceProcess, headers: dict[str, str], field: str, refusal: str
) -> None:
    bisect_id = running_job(service)
    client, csrf = logged_in(service)
    try:
        headers = {name: service.base if value == "same" else value for name, value in headers.items()}
        data = {"right": {"csrf": csrf}, "missing": {}, "wrong": {"csrf": "0" * 64}}[field]
        answer = client.post(f"/bisects/{bisect_id}/cancel", data=data, headers=headers)
        assert (answer.status_code, answer.text) == (403, f"403: {refusal}\n")
        assert service.report(bisect_id)["status"] == "running"
        done = client.post(f"/bisects/{bisect_id}/cancel", data={"csrf": csrf}, headers={"Origin": service.base})
        assert done.status_code == 303
        assert service.report(bisect_id)["status"] == "cancelled"
    finally:
        client.close()
        service.delete(bisect_id, authorization=f"Bearer {ALICE}")


def test_a_post_without_a_login_is_refused(service: ServiceProcess) -> None:
    answer = httpx.post(f"{service.base}/bisects/1/cancel", data={"csrf": "0" * 64}, headers={"Origin": service.base})
    assert answer.status_code == 401
    assert "not logged in" in answer.text


def test_the_csrf_token_belongs_to_one_session(service: ServiceProcess) -> None:
    bisect_id = running_job(service)
    first, first_csrf = logged_in(service)
    second, _ = logged_in(service)
    try:
        answer = second.post(
            f"/bisects/{bisect_id}/cancel", data={"csrf": first_csrf}, headers={"Origin": service.base}
        )
        assert answer.status_code == 403
        assert service.report(bisect_id)["status"] == "running"
    finally:
        first.close()
        second.close()
        service.delete(bisect_id, authorization=f"Bearer {ALICE}")


def test_a_form_served_before_a_restart_is_accepted_after_it(tmp_path: Path) -> None:
    with served(tmp_path) as service:
        bisect_id = running_job(service)
        client, csrf = logged_in(service)
        try:
            service.stop()
            service.start()  # the same port, store and data directory
            answer = client.post(f"/bisects/{bisect_id}/cancel", data={"csrf": csrf}, headers={"Origin": service.base})
            assert answer.status_code == 303, answer.text
        finally:
            client.close()
        assert service.report(bisect_id)["status"] == "cancelled"
    key_file = tmp_path / "data" / "serve-form.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_another_person_s_job_is_refused_from_the_browser_as_from_the_api(service: ServiceProcess) -> None:
    bisect_id = running_job(service)
    client, csrf = logged_in(service, BOB)
    try:
        answer = client.post(f"/bisects/{bisect_id}/cancel", data={"csrf": csrf}, headers={"Origin": service.base})
        assert answer.status_code == 403
        assert (
            answer.text
            == f"403: bob may not cancel bisect {bisect_id}: it is alice's; only its owner or an admin may\n"
        )
        assert service.report(bisect_id)["status"] == "running"
    finally:
        client.close()
        service.delete(bisect_id, authorization=f"Bearer {ALICE}")


def test_pages_refuse_to_be_framed(service: ServiceProcess) -> None:
    assert httpx.get(f"{service.base}/", timeout=60.0).headers["x-frame-options"] == "DENY"


def test_a_mark_that_changes_a_finished_answer_queues_the_bisect_again(service: ServiceProcess) -> None:
    history: SyntheticHistory = service.history  # type: ignore[attr-defined]
    bisect_id = running_job(service, "synthetic")
    assert service.wait_done(bisect_id)["first_bad"]["sha"] == history.shas[history.first_bad]
    client, csrf = logged_in(service)
    try:
        parent = history.shas[history.first_bad - 1]
        form = {"csrf": csrf, "rev": parent, "verdict": "bad", "note": "slow here too"}
        answer = client.post(f"/bisects/{bisect_id}/mark", data=form, headers={"Origin": service.base})
        assert answer.status_code == 303, answer.text
    finally:
        client.close()
    # the server resumes it (no `bisect resume` needed): the manual verdict moves the answer to the parent
    assert service.wait_done(bisect_id)["first_bad"]["sha"] == parent


@pytest.mark.parametrize(("path", "field"), [("/bisects/{id}/rerun", "step"), ("/submit", "priority")])
def test_a_form_number_of_five_thousand_digits_is_a_400(service: ServiceProcess, path: str, field: str) -> None:
    bisect_id = running_job(service)
    client, csrf = logged_in(service)
    try:
        history: SyntheticHistory = service.history  # type: ignore[attr-defined]
        form = {"csrf": csrf, field: "9" * 5000, "repo": str(history.path), "good": history.shas[0], "bad": "main"}
        answer = client.post(path.format(id=bisect_id), data=form, headers={"Origin": service.base})
        assert answer.status_code == 400
        assert {"step": "400: step: a step's number", "priority": "&#39;priority&#39; must be a whole number"}[
            field
        ] in answer.text
    finally:
        client.close()
        service.delete(bisect_id, authorization=f"Bearer {ALICE}")
