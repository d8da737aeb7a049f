"""Debian's Chromium for Playwright: where it is, and the flags it runs with (no sandbox, GPU or network)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


BROWSER_TIMEOUT_MS = 180_000  # a generous bound for a loaded machine; waits end as soon as the page is there


def chromium_path() -> str:
    path = os.environ.get("BISECT_TEST_CHROMIUM", "/usr/bin/chromium")
    if Path(path).exists():
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs Chromium at {path}: .ci/run installs Debian's chromium")
    pytest.skip(f"no Chromium at {path}")


def chromium_expected() -> bool:
    """Whether browser checks run here: always under CI, locally when Chromium is installed."""
    return os.environ.get("CI") == "true" or Path(os.environ.get("BISECT_TEST_CHROMIUM", "/usr/bin/chromium")).exists()
