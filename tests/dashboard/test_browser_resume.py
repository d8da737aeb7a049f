"""Headless Chromium (Debian's, driven by Playwright) on a real `bisect serve`: a bisect paused on a full disk (its
recipe fails as a full disk does while a file exists) shows its owner a Resume button; once the disk is freed, a
click runs it again to its culprit, which the page shows when it ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import BROWSER_TIMEOUT_MS, CHROMIUM_FLAGS, chromium_path
from service.service_process import ServiceProcess, running_service, service_home
from synthetic import SyntheticHistory, culprit_history

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("service")]

ALICE = "alice-token-1"
RECIPE = """[recipes.disk]
run = 'if [ -e "$FULL" ]; then echo "No space left on device" >&2; exit 1; fi; bash test.sh'
env = { FULL = "FULL_PATH" }
"""


@pytest.fixture
def history(tmp_path: Path) -> SyntheticHistory:
    return culprit_history(tmp_path / "repo", 8, 5, sleep_s=0.05)


@pytest.fixture
def full_disk(tmp_path: Path) -> Path:
    return tmp_path / "full"


@pytest.fixture
def service(history: SyntheticHistory, full_disk: Path, tmp_path: Path) -> Iterator[ServiceProcess]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "serve.toml").write_text(RECIPE.replace("FULL_PATH", str(full_disk)))
    (home / "tokens.toml").write_text(f'alice = "{ALICE}"\n')
    args = ["--db", f"sqlite:///{home / 'bisect.db'}", "--allow-repo", str(history.path), "--config",
            str(home / "serve.toml"), "--tokens-file", str(home / "tokens.toml")]  # fmt: skip
    with running_service(*args, **service_home(home), BISECT_TOKEN="") as served:
        yield served


@pytest.fixture
def tab(service: ServiceProcess) -> Iterator[Any]:
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_context().new_page()
            page.set_default_timeout(BROWSER_TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def test_resume_a_paused_bisect_from_its_page(
    tab: Any, service: ServiceProcess, history: SyntheticHistory, full_disk: Path
) -> None:
    from playwright.sync_api import expect

    full_disk.touch()
    body = {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "disk", "explain": False}
    answer = service.post(body, authorization=f"Bearer {ALICE}")
    assert answer.status_code == 201, answer.text
    bisect_id = int(answer.json()["id"])
    paused = service.wait_done(bisect_id)
    assert paused["status"] == "paused"

    page = f"{service.base}/bisects/{bisect_id}"
    tab.goto(f"{service.base}/login?next=/bisects/{bisect_id}")
    tab.fill("#login input[name=token]", ALICE)
    tab.click("#login button[type=submit]")
    tab.wait_for_url(page)
    assert tab.locator("#status").inner_text() == "paused"
    assert tab.locator("#resume-command").inner_text() == f"bisect resume --server {service.base} {bisect_id}"

    full_disk.unlink()
    tab.click("#resume-form button[type=submit]")
    tab.wait_for_url(page)
    # the page polls the bisect while it runs and shows it again once it ends
    expect(tab.locator("#status")).to_have_text("found", timeout=BROWSER_TIMEOUT_MS)
    assert tab.locator("#first-bad").inner_text() == history.shas[history.first_bad]
    assert tab.locator("#resume-form").count() == 0
    assert len(service.report(bisect_id)["steps"]) > len(paused["steps"])
