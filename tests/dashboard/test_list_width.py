"""`bisect list` piped (not a terminal) and at 80 columns: every row readable, whatever its status and range."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fill import METRIC_REGEX, spec, table_history
from rich.console import Console
from synthetic import write_history

from bisector.cli.views import bisect_table, short_repo
from bisector.db.store import Store
from bisector.report.history import find_bisects, parse_filter
from bisector.runner.coordinator import Coordinator
from bisector.runner.wiring import make_executor

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A mismatch (the good endpoint fails) and an ambiguous bisect, in repositories at long paths."""
    root = tmp_path_factory.mktemp("repos") / "a-rather-long-folder-name" / "holding-the-repositories"
    url = f"sqlite:///{root.parent / 'bisect.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BISECT_DATA_DIR", str(root / "data"))
        patch.setenv("BISECT_CACHE_DIR", str(root / "cache"))
        patch.setenv("BISECT_GPUS", "")
        with Store.open(url) as store:
            coordinator = Coordinator(store, make_executor, poll_interval_s=0.02)
            shas = table_history(root / "kernels-monorepo-tables", 6, 2)
            mismatch = coordinator.start(spec(root / "kernels-monorepo-tables", shas[3], shas[-1]))
            assert mismatch.status.value == "endpoints_mismatch"
            history = write_history(root / "skips", ["good"] * 3 + ["skip", "skip", "bad"] + ["bad"] * 2)
            ambiguous = coordinator.start(
                spec(history.path, history.shas[0], history.shas[-1], metric=METRIC_REGEX, expect=">= 8")
            )
            assert ambiguous.status.value == "ambiguous"
    return url


def assert_readable(text: str, width: int, repos: list[str]) -> None:
    lines = text.rstrip("\n").splitlines()
    assert all(len(line) <= width for line in lines), text
    for status in ("endpoints", "_mismatch", "ambiguous"):
        assert any(status in line.split() for line in lines), text
    # the repo column keeps at least 9 characters a line: no column squeezed to a letter a line
    for repo in repos:
        shown = short_repo(repo)
        assert shown.startswith("…/")
        assert shown[:9] in text, text


def test_piped_list_keeps_every_column_readable_at_130(store_url: str):
    done = subprocess.run(
        [sys.executable, "-m", "bisector", "list"],
        capture_output=True,
        text=True,
        env={**os.environ, "BISECT_DB": store_url, "PYTHONPATH": str(ROOT)},
        check=True,
        timeout=120,
    )
    with Store.open(store_url) as store:
        repos = [s.repo for s in find_bisects(store, parse_filter(None, None, None, None, None), 10)]
    assert_readable(done.stdout, 130, repos)
    for repo in repos:
        assert short_repo(repo) in done.stdout  # whole on one line at 130


def test_list_table_is_readable_at_80_columns(store_url: str):
    with Store.open(store_url) as store:
        summaries = find_bisects(store, parse_filter(None, None, None, None, None), 10)
    console = Console(width=80, file=io.StringIO(), highlight=False, color_system=None)
    console.print(bisect_table(summaries, 80))
    assert_readable(console.file.getvalue(), 80, [s.repo for s in summaries])  # type: ignore[attr-defined]


def test_short_repo_keeps_the_last_components():
    assert short_repo("/home/me/src/gpu-stack") == "/home/me/src/gpu-stack"
    assert short_repo("/very/long/path/to/some/where/kernels/repo") == "…/to/some/where/kernels/repo"
    assert short_repo("/x/" + "r" * 40) == "…/" + "r" * 40
