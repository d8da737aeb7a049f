"""The bisect page's plot over a real bisect with a cancelled step, served by the real dashboard."""

from __future__ import annotations

import html
import re
import shlex
import statistics
import sys
from collections import Counter
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


# the synthetic test's metric (10 good, 5 bad) plus a tenth per step id modulo 5: repeats that differ
NOISY_RUN = (
    "v=$(bash test.sh | sed -n 's/^metric: //p'); "
    """awk -v v="$v" -v s="$BISECT_STEP_ID" 'BEGIN { printf "metric: %.1f\\n", v + (s % 5) / 10 }'"""
)


@pytest.mark.parametrize("expect", [">= 8", "auto"])
def test_a_bisect_with_repeats_shows_every_sample_and_the_statistic_that_decided_each_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expect: str
) -> None:
    """--repeat 5: each run's sample is a point of its own; the threshold, or (--expect auto) each endpoint's samples,
    is drawn; the table of commits gives each tested commit its verdict and the decision's p-value and reason."""
    monkeypatch.setenv("BISECT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BISECT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BISECT_GPUS", "")
    url = f"sqlite:///{tmp_path / 'bisect.db'}"
    history = write_history(tmp_path / "repo", ["good"] * 3 + ["bad"] * 6)
    direction = {"direction": "higher"} if expect == "auto" else {}
    values = {"run": NOISY_RUN, "metric": METRIC_REGEX, "expect": expect, "repeat": 5, "explain": False, **direction}
    with Store.open(url) as store:
        coordinator = Coordinator(store, make_executor, poll_interval_s=0.02)
        record = coordinator.start(spec(history.path, history.shas[0], history.shas[-1], **values))
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[3])
    with running_dashboard(url, tmp_path / "data" / "logs") as base:
        report = httpx.get(f"{base}/api/bisects/1", timeout=60.0).json()
        page = httpx.get(f"{base}/bisects/1", timeout=60.0).text
    evidence = [s for s in report["steps"] if s["purpose"] in ("search", "confirm") and s["verdict"] != "cancelled"]
    measured = sorted((s["sha"], v) for s in evidence for v in s["samples"])
    drawn = sorted((sha, float(v)) for sha, v in re.findall(r'data-sha="(\w+)" data-value="([0-9.]+)"', page))
    assert drawn == measured
    assert min(Counter(sha for sha, _ in drawn).values()) >= 5  # every run's sample, not one point per commit
    row = re.compile(r'<tr data-sha="(\w+)" data-samples="([^"]*)"(?: data-p-value="([^"]+)")?')
    rows = {sha: (samples.split(), p_value) for sha, samples, p_value in row.findall(page)}
    decisions = report["decisions"]
    assert decisions
    for sha, decision in decisions.items():
        assert len(rows[sha][0]) == decision["n"] >= 5
        assert float(rows[sha][1]) == decision["p_value"]
        assert html.escape(decision["reason"]) in page
    last_samples = {sha: [s["samples"][-1] for s in evidence if s["sha"] == sha] for sha in (record.good, record.bad)}
    if expect == "auto":
        assert 'id="threshold"' not in page
        for name, sha in (("good", record.good), ("bad", record.bad)):
            band = re.search(rf'id="endpoint-{name}"[^>]* data-median="([0-9.]+)" data-n="(\d+)"', page, re.S)
            assert band is not None
            assert (float(band[1]), int(band[2])) == (statistics.median(last_samples[sha]), len(last_samples[sha]))
    else:
        assert 'id="threshold"' in page
        assert 'id="endpoint-good"' not in page


def test_once_flakes_show_each_commit_gets_the_noisy_searchs_posterior(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pass/fail with --repeat 3, the bisect's first run failing at the good endpoint: the results contradict each
    other, the noisy search's posterior decides, and the table gives each tested commit P(bad) from it."""
    monkeypatch.setenv("BISECT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BISECT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BISECT_GPUS", "")
    url = f"sqlite:///{tmp_path / 'bisect.db'}"
    history = write_history(tmp_path / "repo", ["good"] * 4 + ["bad"] * 5)
    run = 'if [ "$BISECT_STEP_ID" = 1 ]; then exit 1; fi; bash test.sh'
    with Store.open(url) as store:
        coordinator = Coordinator(store, make_executor, poll_interval_s=0.02)
        record = coordinator.start(
            spec(history.path, history.shas[0], history.shas[-1], run=run, repeat=3, explain=False)
        )
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[4])
    with running_dashboard(url, tmp_path / "data" / "logs") as base:
        assert httpx.get(f"{base}/api/bisects/1", timeout=60.0).json()["flake_seen"]
        page = httpx.get(f"{base}/bisects/1", timeout=60.0).text
    posterior = {
        history.shas.index(sha): float(p)
        for sha, p in re.findall(r'data-sha="(\w+)"[^>]* data-posterior="([^"]+)"', page)
    }
    assert posterior[0] == 0.0
    assert posterior[4] >= 0.99  # the noisy search's confidence in its answer
    assert all(posterior[p] < 0.01 for p in posterior if p < 4)
    assert f"P(bad) = {posterior[4]:.3f} by the posterior over the first bad commit" in page
