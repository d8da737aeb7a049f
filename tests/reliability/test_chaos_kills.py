"""Random SIGKILLs while bisects share one store and one machine: of whole jobs, coordinators alone and single
workers (or their fork server) with every bisect resumed, and of a `bisect serve` started again on its address.
Every bisect names its culprit, no process is left running and no commit got two verdicts. The soaks are
benchmarks/chaos_kill.py and chaos_service.py (larger runs in docs/reliability.md); these run small ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def soak(tmp_path: Path, script: str, *options: str) -> dict[str, object]:
    out, work = tmp_path / "chaos.json", tmp_path / "work"
    work.mkdir()
    argv = [sys.executable, str(BENCHMARKS / script), *options, "--work", str(work), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    results: dict[str, object] = json.loads(out.read_text())
    assert results["left_running"] == 0
    assert results["integrity"] == "ok"
    return results


def test_bisects_killed_at_random_and_resumed_find_their_culprits(tmp_path: Path) -> None:
    options = ["--bisects", "2", "--commits", "120", "--workers", "2", "--sleep", "0.5", "--kills", "4",
               "--kill-window", "2.0", "--one-repo", "--seed", "7"]  # fmt: skip
    rows = soak(tmp_path, "chaos_kill.py", *options)["rows"]
    assert isinstance(rows, list)
    assert [row["correct"] for row in rows] == [True, True]
    # A first run needs about 5 rounds of 0.5 s tests, so its kill, at most 2 s in, lands; later ones may not.
    assert all(row["kills"] for row in rows)


def test_a_server_killed_at_random_and_started_again_finishes_every_job(tmp_path: Path) -> None:
    options = ["--jobs", "3", "--slots", "2", "--commits", "300", "--sleep", "0.5", "--kills", "3",
               "--kill-window", "2.0", "--seed", "7"]  # fmt: skip
    results = soak(tmp_path, "chaos_service.py", *options)
    rows = results["rows"]
    assert isinstance(rows, list)
    assert [row["correct"] for row in rows] == [True, True, True]
    assert results["kills"]  # 3 jobs of ~6 rounds on 2 slots outlast the first kill, at most 2 s in
