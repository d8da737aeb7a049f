"""Headless Chromium (Debian's, driven by Playwright) acting on a real `bisect serve` through the dashboard: log in,
submit, cancel, rerun a step, mark a commit; and a forged POST from another origin of the same host refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser import BROWSER_TIMEOUT_MS, CHROMIUM_FLAGS, chromium_path
from service.service_process import (
    DONE_TIMEOUT_S,
    ServiceProcess,
    free_port,
    running_team_service,
)
from synthetic import SyntheticHistory, culprit_history

from bisector.dashboard.actions import FOREIGN_ORIGIN

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("service")]

ALICE, BOB = "alice-token-1", "bob-token-2"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> SyntheticHistory:
    return culprit_history(tmp_path_factory.mktemp("hist") / "repo", 8, 5, sleep_s=0.05)


@pytest.fixture(scope="module")
def service(history: SyntheticHistory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    home = tmp_path_factory.mktemp("home")
    with running_team_service(home, history.path, f'alice = "{ALICE}"\nbob = "{BOB}"\n') as served:
        yield served


@pytest.fixture(scope="module")
def browser(service: ServiceProcess) -> Iterator[Any]:
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


def log_in(browser: Any, service: ServiceProcess, token: str, then: str = "/") -> Any:
    """A tab of a fresh browser session, logged in through the form, on the page `then`."""
    tab = browser.new_context().new_page()
    tab.set_default_timeout(BROWSER_TIMEOUT_MS)
    tab.goto(f"{service.base}/login?next={then}")
    tab.fill("#login input[name=token]", token)
    tab.click("#login button[type=submit]")
    tab.wait_for_url(f"{service.base}{then}")
    return tab


@pytest.fixture(scope="module")
def alice(browser: Any, service: ServiceProcess) -> Iterator[Any]:
    tab = log_in(browser, service, ALICE)
    yield tab
    tab.context.close()


def submitted(service: ServiceProcess, history: SyntheticHistory, recipe: str) -> int:
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": recipe, "explain": False}
    answer = service.post(body, authorization=f"Bearer {ALICE}")
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_the_login_keeps_the_token_in_an_http_only_strict_cookie(browser: Any, service: ServiceProcess) -> None:
    tab = log_in(browser, service, BOB, "/submit")
    try:
        assert tab.locator("#who").inner_text().startswith("bob")
        cookies = {c["name"]: c for c in tab.context.cookies()}
        assert cookies["bisect_token"]["value"] == BOB
        for cookie in cookies.values():
            assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
        assert tab.evaluate("document.cookie") == ""  # no script of the page reads them
        tab.click("#who button[type=submit]")  # log out
        tab.wait_for_url(f"{service.base}/")
        assert tab.context.cookies() == []
        assert tab.locator("#who").inner_text() == "log in"
    finally:
        tab.context.close()


def test_submit_through_the_form(alice: Any, service: ServiceProcess, history: SyntheticHistory) -> None:
    alice.goto(f"{service.base}/submit")
    alice.select_option("#submit select[name=repo]", str(history.path))
    alice.fill("#submit input[name=good]", history.shas[0])
    alice.fill("#submit input[name=bad]", "main")
    alice.fill("#submit input[name=recipe]", "synthetic")
    alice.click("#submit button[type=submit]")
    alice.wait_for_url(f"{service.base}/bisects/*")
    bisect_id = int(alice.url.rsplit("/", 1)[1])
    assert service.job(bisect_id)["owner"] == "alice"
    assert service.wait_done(bisect_id)["first_bad"]["sha"] == history.shas[history.first_bad]
    alice.goto(f"{service.base}/submit")
    alice.fill("#submit input[name=good]", history.shas[0])
    alice.fill("#submit input[name=bad]", "main")
    alice.fill("#submit input[name=recipe]", "nope")
    alice.click("#submit button[type=submit]")
    assert "unknown recipe 'nope'" in alice.locator("#problem").inner_text()
    assert alice.input_value("#submit input[name=good]") == history.shas[0]  # the form keeps what was given


def test_cancel_from_the_bisect_page(alice: Any, service: ServiceProcess, history: SyntheticHistory) -> None:
    bisect_id = submitted(service, history, "slow")
    try:
        alice.goto(f"{service.base}/bisects/{bisect_id}")
        alice.click("#cancel button[type=submit]")
        alice.wait_for_url(f"{service.base}/bisects/{bisect_id}")
        assert service.wait_done(bisect_id)["status"] == "cancelled"
        alice.reload()
        assert alice.locator("#cancel").count() == 0  # an ended bisect offers no cancel
    finally:
        service.delete(bisect_id, authorization=f"Bearer {ALICE}")


def test_rerun_a_step_and_mark_a_commit(alice: Any, service: ServiceProcess, history: SyntheticHistory) -> None:
    bisect_id = submitted(service, history, "synthetic")
    report = service.wait_done(bisect_id)
    before = len(report["steps"])
    alice.goto(f"{service.base}/bisects/{bisect_id}")
    alice.fill("#rerun input[name=step]", "1")
    alice.click("#rerun button[type=submit]")
    alice.wait_for_url(f"{service.base}/bisects/{bisect_id}")

    def reruns() -> list[dict[str, Any]]:
        return [s for s in service.report(bisect_id)["steps"] if s["purpose"] == "rerun"]

    wait_for(lambda: [s["verdict"] for s in reruns()] not in ([], ["running"]), "the rerun's step")
    [rerun] = reruns()
    assert (rerun["sha"], rerun["verdict"]) == (report["steps"][0]["sha"], report["steps"][0]["verdict"])

    alice.goto(f"{service.base}/bisects/{bisect_id}")
    alice.fill("#mark input[name=rev]", history.shas[1])
    alice.select_option("#mark select[name=verdict]", "good")
    alice.fill("#mark input[name=note]", "seen by eye")
    alice.click("#mark button[type=submit]")
    alice.wait_for_url(f"{service.base}/bisects/{bisect_id}")
    steps = service.report(bisect_id)["steps"]
    assert len(steps) == before + 2
    manual = [s for s in steps if s["purpose"] == "manual"]
    assert [(s["sha"], s["verdict"], s["detail"]) for s in manual] == [
        (history.shas[1], "good", "marked good by alice: seen by eye")
    ]
    assert service.report(bisect_id)["status"] == "found"  # a mark that agrees with the answer changes nothing


def test_a_forged_post_from_another_origin_is_refused(
    alice: Any, service: ServiceProcess, history: SyntheticHistory
) -> None:
    """A page on another port of the same host is the same site: the browser sends the Strict cookies with its
    form, so the Origin check and the CSRF token are what refuse it."""
    bisect_id = submitted(service, history, "slow")
    evil = f"http://127.0.0.1:{free_port()}/prize"
    page = (
        f'<form id="forged" method="post" action="{service.base}/bisects/{bisect_id}/cancel">'
        '<input type="hidden" name="csrf" value="guess"></form><script>document.getElementById("forged").submit()'
        "</script>"
    )
    tab = alice.context.new_page()
    try:
        tab.route(evil, lambda route: route.fulfill(status=200, content_type="text/html", body=page))
        with tab.expect_response(f"{service.base}/bisects/{bisect_id}/cancel") as answered:
            tab.goto(evil)
        response = answered.value
        assert response.request.all_headers().get("cookie", "").count("bisect_") == 2  # the cookies went along
        assert response.status == 403
        assert response.text() == f"403: {FOREIGN_ORIGIN}\n"
        assert service.report(bisect_id)["status"] == "running"
        assert httpx.get(f"{service.base}/api/jobs/{bisect_id}", timeout=60.0).json()["state"] != "done"
    finally:
        tab.close()
        service.delete(bisect_id, authorization=f"Bearer {ALICE}")
