"""The bisect page's plot over a real bisect with a cancelled step, served by the real dashboard."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import httpx
import pytest
from fill import METRIC_REGEX, spec
from server import ROOT, running_dashboard
from synthetic import write_history

from bisector.db.store import Store
from bisector.runner.coordinator import Coordinator
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus


def test_cancelled_steps_are_not_drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancelled step measured nothing: the plot leaves it out (the steps table still lists it). The step at
    the culprit's parent, which the search must test, cancels the bisect and waits to be stopped."""
    monkeypatch.setenv("BISECT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BISECT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BISECT_GPUS", "")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    url = f"sqlite:///{tmp_path / 'bisect.db'}"
    history = write_history(tmp_path / "repo", ["good"] * 3 + ["bad"] * 10)
    cancel = f"{shlex.quote(sys.executable)} -m bisector cancel 1 --db {shlex.quote(url)}"
    run = f'if [ "$(cat counter.txt)" = 2 ]; then {cancel} && sleep 600; fi; bash test.sh'
    with Store.open(url) as store:
        record = Coordinator(store, make_executor, poll_interval_s=0.02).start(
            spec(history.path, history.shas[0], history.shas[-1], run=run, metric=METRIC_REGEX, expect=">= 8")
        )
    assert (record.id, record.status) == (1, BisectStatus.CANCELLED)
    with running_dashboard(url, tmp_path / "data" / "logs") as base:
        report = httpx.get(f"{base}/api/bisects/1", timeout=60.0).json()
        page = httpx.get(f"{base}/bisects/1", timeout=60.0).text
    cancelled = [s for s in report["steps"] if s["verdict"] == "cancelled"]
    measured = [(s["verdict"], s["sha"], v) for s in report["steps"] if s not in cancelled for v in s["samples"]]
    assert cancelled
    assert measured
    drawn = re.findall(r'data-verdict="(\w+)" data-sha="(\w+)" data-value="([0-9.]+)"', page)
    assert sorted((v, sha, float(x)) for v, sha, x in drawn) == sorted(measured)
    assert 'data-verdict="cancelled"' not in page
    assert page.count('<td class="verdict cancelled">cancelled</td>') == len(cancelled)
