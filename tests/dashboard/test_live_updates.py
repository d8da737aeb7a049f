"""A bisect that runs while the dashboard serves it: the API shows its progress, the page follows it to the end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from browser import CHROMIUM_FLAGS, chromium_expected, chromium_path
from server import ROOT, running_dashboard
from synthetic import culprit_history

WAIT_S = 300.0  # a generous bound on a slow shared machine; the test ends as soon as the state is seen


def wait_for(predicate, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"never saw {what}")


def test_running_bisect_progress_in_the_api_and_the_page(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 24, 17, sleep_s=3.0)  # each step runs for 3 s
    store_url = f"sqlite:///{tmp_path / 'bisect.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_DB": store_url, "BISECT_DATA_DIR": str(tmp_path / "data")}
    command = [
        sys.executable, "-m", "bisector", "start", "--repo", str(history.path), "--good", history.shas[0],
        "--bad", history.shas[-1], "--run", "bash test.sh", "--workers", "2", "--no-explain",
    ]  # fmt: skip
    with running_dashboard(store_url, tmp_path / "data" / "logs") as base:
        # The dashboard serves the store before the bisect starts, so no state of the bisect goes unseen.
        bisect = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:

            def api(path: str):
                response = httpx.get(base + path, timeout=60.0)
                return response.json() if response.status_code == 200 else None

            listed = wait_for(lambda: api("/api/bisects"), "the bisect in the list")
            bisect_id = listed[0]["id"]
            running = wait_for(
                lambda: (s := api(f"/api/bisects/{bisect_id}/steps")) and s["progress"]["running"] > 0 and s,
                "a running step",
            )
            assert running["status"] == "running"
            assert any(step["verdict"] == "running" for step in running["steps"])
            page = httpx.get(f"{base}/", timeout=60.0).text
            assert f'data-id="{bisect_id}" data-status="running"' in page
            if chromium_expected():
                follow_in_the_browser(base, bisect_id)
            done = wait_for(
                lambda: (s := api(f"/api/bisects/{bisect_id}/steps")) and s["status"] != "running" and s, "the end"
            )
            assert done["status"] == "found"
            assert done["progress"]["running"] == 0
            assert api(f"/api/bisects/{bisect_id}")["first_bad"]["sha"] == history.shas[17]
        finally:
            bisect.wait(timeout=WAIT_S)
    assert bisect.returncode == 0


def follow_in_the_browser(base: str, bisect_id: int) -> None:
    """The page polls while the bisect runs, shows the progress, and reloads into the final report."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        try:
            tab = browser.new_page()
            tab.goto(f"{base}/bisects/{bisect_id}")
            if tab.locator("#status").inner_text() == "running":
                tab.wait_for_function(
                    "document.getElementById('progress').textContent.includes('running')", timeout=WAIT_S * 1000
                )
            tab.wait_for_function("document.getElementById('status').textContent === 'found'", timeout=WAIT_S * 1000)
            assert tab.locator("#boundary").count() == 1
        finally:
            browser.close()
