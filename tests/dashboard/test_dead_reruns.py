"""A `run-at --bisect` killed while its step ran leaves the step stored as running until a command ends it: the
dashboard (and `bisect serve`'s pages, the same app) shows it as it will be stored, interrupted, and writes nothing."""

from __future__ import annotations

import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import httpx
from bisect_helpers import stored_rows, synthetic_spec
from server import running_dashboard
from synthetic import culprit_history

from bisector.db.step_table import RERUN_DIED_DETAIL
from bisector.db.store import Store
from bisector.runner.coordinator import prepare_bisect
from bisector.vocab.domain import StepPurpose


def a_killed_rerun(tmp_path: Path, db: Path) -> int:
    """A bisect with the record a rerun killed by SIGKILL leaves: its entry (its process gone from this host, its
    heartbeat fresh) and its step, running. The step's id."""
    history = culprit_history(tmp_path / "repo", 4, 2)
    sha, now = history.shas[-1], datetime.now(UTC)
    gone = subprocess.Popen(["true"])
    gone.wait()
    entry = {"owner": f"{socket.gethostname()}:{gone.pid}:1", "sha": sha, "heartbeat": now.isoformat(), "ttl_s": 60}
    with Store.open(f"sqlite:///{db}") as store:
        bisect_id = prepare_bisect(store, synthetic_spec(history.path, history.shas[0], sha))
        step_id = store.start_step(bisect_id, sha, 1, "local-0", "localhost", (), now, purpose=StepPurpose.RERUN)
        store.update_extra(bisect_id, reruns={"token": entry})
    return step_id


def test_the_dashboard_shows_a_killed_rerun_s_step_interrupted_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    step_id = a_killed_rerun(tmp_path, db)
    with running_dashboard(f"sqlite:///{db}", tmp_path / "logs") as base:
        steps = httpx.get(f"{base}/api/bisects/1/steps", timeout=30).json()
        report = httpx.get(f"{base}/api/bisects/1", timeout=30).json()
        page = httpx.get(f"{base}/bisects/1", timeout=30).text
    [step] = steps["steps"]
    assert (step["verdict"], step["error_kind"], step["detail"]) == ("error", "interrupted", RERUN_DIED_DETAIL)
    assert steps["progress"] == {"steps": 1, "finished": 1, "running": 0}
    assert [(s["verdict"], s["detail"]) for s in report["steps"]] == [("error", RERUN_DIED_DETAIL)]
    assert "running" not in page.split("<table", 1)[-1]
    assert stored_rows(db, f"select verdict from steps where id = {step_id}") == [(None,)]
