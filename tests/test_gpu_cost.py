"""GPU-seconds: one rule (vocab/cost.py) for the report, `bisect stats` and the dashboard; a CPU-only step adds 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from synthetic import culprit_history

from bisector.db.store import Store
from bisector.runner.config import build_spec
from bisector.vocab.cost import gpu_seconds
from bisector.vocab.domain import StepResult, Verdict

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def bisect(db: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_DB": f"sqlite:///{db}"}
    done = subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_stats_and_the_report_count_the_gpus_a_step_held_and_nothing_for_a_cpu_step(tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 6, 3)
    spec = build_spec(history.path, {"good": history.shas[0], "bad": history.shas[-1], "run": "bash test.sh"})
    db = tmp_path / "b.db"
    with Store.open(f"sqlite:///{db}") as store:
        bisect_id = store.create_bisect(str(history.path), history.shas[0], history.shas[-1], spec.to_json(), T0)
        for sha, gpus, held_s in ((history.shas[1], (), 10.0), (history.shas[2], (0, 3), 30.0)):
            step = store.start_step(bisect_id, sha, 1, "w", "n", gpus, T0)
            # build_s + run_s (what the old statistics counted) differ from the time the step held its GPUs.
            result = StepResult(step, sha, Verdict.GOOD, build_s=1.0, run_s=2.0)
            store.finish_step(step, result, T0 + timedelta(seconds=held_s))
        store.start_step(bisect_id, history.shas[4], 1, "w", "n", (1,), T0)
        store.interrupt_running_steps(bisect_id, T0 + timedelta(seconds=5))  # a stopped coordinator's step
    report = bisect(db, "report", str(bisect_id), "--format", "json")
    (group,) = bisect(db, "stats", "--format", "json")["groups"]
    assert report["gpu_seconds"] == 2 * 30.0 + 1 * 5.0
    assert group["gpu_hours"] == pytest.approx(report["gpu_seconds"] / 3600, abs=1e-6)  # JSON keeps 6 decimals


def test_a_step_costs_its_held_time_times_its_gpus_clamped_against_broken_clocks() -> None:
    assert gpu_seconds((0, 1), T0, T0 + timedelta(seconds=4)) == 8.0
    assert gpu_seconds((), T0, T0 + timedelta(seconds=4)) == 0.0
    assert gpu_seconds((2,), T0, None) == 0.0  # still running
    assert gpu_seconds((2,), T0, T0 - timedelta(seconds=4)) == 0.0  # the clock went back
    assert gpu_seconds((2, 3), T0, T0 + timedelta(days=365 * 100)) == 2e9
