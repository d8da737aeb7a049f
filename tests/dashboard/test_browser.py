"""Headless Chromium (Debian's, driven by Playwright) over the dashboard of a store filled by real bisects.

The screenshots are kept in $BISECT_TEST_ARTIFACTS (default: test-artifacts/ in the checkout).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from browser import BROWSER_TIMEOUT_MS, CHROMIUM_FLAGS, chromium_path
from fill import Filled
from server import ROOT, running_dashboard

pytestmark = pytest.mark.browser


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("BISECT_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def page(store_url: str, filled: Filled) -> Iterator[tuple[object, str]]:
    if not store_url.startswith("sqlite"):
        pytest.skip("the browser test runs once, over the SQLite store (the API tests cover both backends)")
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with running_dashboard(store_url, filled.log_dir) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 1000})
            tab.set_default_timeout(BROWSER_TIMEOUT_MS)
            yield tab, base
        finally:
            browser.close()


def test_filter_open_and_check_the_plot(page, filled: Filled):
    tab, base = page
    tab.goto(base + "/")
    assert tab.locator("#bisects tbody tr").count() == 3
    tab.fill("input[name=status]", "found")
    tab.fill("input[name=metric]", "metric")
    tab.click("#filters button[type=submit]")
    tab.wait_for_url("**/?*status=found*")
    rows = tab.locator("#bisects tbody tr")
    assert rows.count() == 1
    assert rows.first.get_attribute("data-id") == str(filled.found_id)
    tab.screenshot(path=str(artifacts_dir() / "dashboard-list.png"), full_page=True)

    tab.click(f"#bisects a[href='/bisects/{filled.found_id}']")
    tab.wait_for_selector("#plot")
    report = httpx.get(f"{base}/api/bisects/{filled.found_id}", timeout=60.0).json()
    boundary = tab.locator("#boundary")
    assert int(boundary.get_attribute("data-first-bad")) == report["first_bad"]["position"]
    assert int(boundary.get_attribute("data-last-good")) == report["last_good"]["position"]
    drawn = tab.eval_on_selector_all(
        "#plot circle.point",
        "els => els.map(e => [+e.dataset.position, e.dataset.verdict, +e.dataset.value, +e.getAttribute('cx')])",
    )
    expected = sorted(
        (s["position"], s["verdict"], v)
        for s in report["steps"]
        if s["purpose"] in ("search", "confirm")
        for v in s["samples"]
    )
    measured = [(p, v, x, cx) for p, v, x, cx in drawn if x == x]  # NaN: a step without a metric, on the axis
    assert sorted((p, v, x) for p, v, x, _ in measured) == expected
    boundary_x = float(boundary.get_attribute("x1"))
    # good points lie left of the boundary, bad points right of it
    assert all(cx < boundary_x for _, verdict, _, cx in drawn if verdict == "good")
    assert all(cx > boundary_x for _, verdict, _, cx in drawn if verdict == "bad")
    assert tab.locator("#first-bad").inner_text() == report["first_bad"]["sha"]
    assert "BLOCK" in tab.locator("#explanation").inner_text()
    assert tab.locator("#reproduce").inner_text() == report["reproduce"]
    tab.screenshot(path=str(artifacts_dir() / "dashboard-bisect.png"), full_page=True)


def test_steps_table_sorts_and_stats_page_draws_weeks(page, filled: Filled):
    tab, base = page
    tab.goto(f"{base}/bisects/{filled.exit_code_id}")  # its steps' ids in the store do not start at 1
    numbers = [int(t) for t in tab.locator("#steps tbody tr td:nth-child(1)").all_inner_texts()]
    assert len(numbers) > 1
    assert numbers == list(range(1, len(numbers) + 1))  # as `bisect report` and `bisect rerun --step` number them
    tab.goto(f"{base}/bisects/{filled.found_id}")
    tab.click("#steps th:nth-child(2)")  # position, ascending
    tab.click("#steps th:nth-child(2)")  # descending
    positions = [int(t) for t in tab.locator("#steps tbody tr td:nth-child(2)").all_inner_texts()]
    assert positions == sorted(positions, reverse=True)
    assert positions != sorted(positions)
    tab.goto(f"{base}/stats")
    weeks = tab.locator("#weekly rect.week")
    assert sum(int(weeks.nth(i).get_attribute("data-count")) for i in range(weeks.count())) == 3
    assert "tuning.py" in tab.locator("#stats").inner_text()
    tab.screenshot(path=str(artifacts_dir() / "dashboard-stats.png"), full_page=True)
