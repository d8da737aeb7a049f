"""Fixtures of the analysis tests: real git histories built commit by commit in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysis_history import History


@pytest.fixture
def history(tmp_path: Path) -> History:
    return History(tmp_path / "repo")
