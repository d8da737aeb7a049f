"""`bisect run-at` rows in `bisect list` and `bisect images ls`, as a user runs them (real repos, real processes)."""

from __future__ import annotations

import json
from pathlib import Path

from bisect_helpers import run_cli
from synthetic import culprit_history

METRIC = ["--metric", r"metric: ([0-9.]+)", "--expect", ">= 8"]


def test_an_ad_hoc_run_that_decided_bad_is_listed_with_its_outcome_not_as_a_failed_bisect(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 4, 2)
    db = tmp_path / "b.db"
    ran = run_cli("run-at", "main", "--repo", str(history.path), "--run", "bash test.sh", *METRIC,
                  "--image", "none", "--executor", "inprocess", db=db)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert " bad  metric 5" in ran.stdout
    listed = json.loads(run_cli("list", "--format", "json", db=db).stdout)
    assert [(row["status"], row["adhoc_outcome"]) for row in listed] == [("adhoc bad", "bad")]
    table = run_cli("list", db=db).stdout.splitlines()
    assert table[0].split()[:4] == ["id", "status", "created", "(UTC)"]  # the times are UTC's, as the report says
    assert table[1].split()[:3] == ["1", "adhoc", "bad"]
    assert json.loads(run_cli("list", "--status", "failed", "--format", "json", db=db).stdout) == []
    assert json.loads(run_cli("stats", "--format", "json", db=db).stdout)["groups"] == []


def test_images_ls_prints_a_header_row_above_the_images(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 4, 2)
    db = tmp_path / "b.db"
    ran = run_cli("run-at", "main", "--repo", str(history.path), "--run", "bash test.sh", *METRIC,
                  "--image", "venv", "--executor", "inprocess", db=db)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    image = json.loads(run_cli("images", "ls", "--format", "json", db=db).stdout)[0]
    lines = run_cli("images", "ls", db=db).stdout.splitlines()
    assert lines[0].split() == ["id", "commit", "status", "source", "size", "build", "last", "used", "(UTC)", "node"]
    assert lines[1].split()[:3] == [image["id"], history.shas[-1][:12], "ready"]
    assert len(lines) == 2
