"""Step logs stay within $BISECT_LOGS_MAX_SIZE per store: real bisects write real logs, the oldest ended bisects'
folders go (each leaves a note the log views print), running bisects' folders and fresh ones stay."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from bisect_helpers import cli_env, run_cli
from synthetic import RUN_CMD, culprit_history

from bisector.db.store import Store
from bisector.report.history import log_tail
from bisector.runner.log_retention import PRUNED_NOTE, RECENT_S, log_folders, prune_logs
from bisector.vocab.domain import BisectStatus
from bisector.vocab.paths import log_dir


def bisect(repo: Path, db: Path, good: str, **variables: str) -> tuple[int, str]:
    """A finished bisect's id and its stderr."""
    env = cli_env(db, **variables)
    done = run_cli("start", "--repo", str(repo), "--good", good, "--bad", "main", "--run", RUN_CMD, "--no-explain",
                   "--format", "json", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["id"]), done.stderr


def age(folder: Path, seconds: float) -> None:
    """Make every file of a log folder last written `seconds` ago."""
    then = time.time() - seconds
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (then, then))


def folders_by_id(db: Path) -> dict[int, dict[str, object]]:
    listed = run_cli("step-logs", "ls", "--format", "json", db=db)
    assert listed.returncode == 0, listed.stderr
    return {row["bisect"]: row for row in json.loads(listed.stdout)}


def test_the_oldest_ended_bisects_logs_go_first_and_leave_a_note(tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 30, 17)
    db = tmp_path / "bisect.db"
    first, _ = bisect(history.path, db, history.shas[0], BISECT_LOGS_MAX_SIZE="none")
    second, _ = bisect(history.path, db, history.shas[0], BISECT_LOGS_MAX_SIZE="none")
    with Store.open(f"sqlite:///{db}") as store:
        first_dir, second_dir = log_dir(store.identity, first), log_dir(store.identity, second)
        step_log = Path(store.steps(first)[0].log_path)
    age(first_dir, 3 * RECENT_S)
    age(second_dir, 2 * RECENT_S)
    listed = folders_by_id(db)
    assert {listed[first]["state"], listed[second]["state"]} == {"ended"}
    assert step_log.parent == first_dir

    keep = int(listed[second]["size"])  # type: ignore[call-overload]
    pruned = run_cli("step-logs", "prune", "--max-size", str(keep + 1), db=db)
    assert pruned.returncode == 0, pruned.stderr
    assert "removed the logs of 1 bisect(s)" in pruned.stdout
    assert [p.name for p in first_dir.iterdir()] == [PRUNED_NOTE]
    assert len(list(second_dir.iterdir())) > 1
    tail = log_tail(step_log)
    assert tail is not None
    assert f"step logs of bisect {first}" in tail
    shown = run_cli("show", str(first), db=db)
    assert f"step logs of bisect {first}" in shown.stdout
    assert folders_by_id(db)[first]["state"] == "removed"


def test_an_ended_bisect_applies_the_cap_without_touching_fresh_or_running_folders(tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 30, 17)
    db = tmp_path / "bisect.db"
    old, _ = bisect(history.path, db, history.shas[0], BISECT_LOGS_MAX_SIZE="none")
    with Store.open(f"sqlite:///{db}") as store:
        identity = store.identity
        running = store.create_bisect(str(history.path), history.shas[0], history.shas[-1], {}, datetime.now(UTC))
    running_dir = log_dir(identity, running)
    running_dir.mkdir(parents=True)
    (running_dir / "step-1-abc.log").write_text("still running\n" * 1000)
    unknown_dir = log_dir(identity, 999)  # a bisect the store no longer holds
    unknown_dir.mkdir()
    (unknown_dir / "step-5-def.log").write_text("orphan\n")
    for folder in (log_dir(identity, old), running_dir, unknown_dir):
        age(folder, 2 * RECENT_S)

    new, stderr = bisect(history.path, db, history.shas[0], BISECT_LOGS_MAX_SIZE="1")
    assert "removed the step logs of 2 ended bisect(s)" in stderr
    listed = folders_by_id(db)
    assert (listed[old]["state"], listed[999]["state"]) == ("removed", "removed")
    assert listed[running]["state"] == "running or paused"
    assert (running_dir / "step-1-abc.log").exists()
    assert listed[new]["state"] == "ended"  # written just now: kept although the store is over 1 byte
    assert int(listed[new]["size"]) > 0  # type: ignore[call-overload]


def test_a_bad_cap_is_noted_and_the_bisect_still_ends(tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 10, 4)
    db = tmp_path / "bisect.db"
    _, stderr = bisect(history.path, db, history.shas[0], BISECT_LOGS_MAX_SIZE="lots")
    assert "log retention skipped: 'lots' is not a size" in stderr
    refused = run_cli("step-logs", "prune", "--max-size", "lots", db=db)
    assert (refused.returncode, refused.stderr.strip()) == (2, "bisect: error: 'lots' is not a size: write a "
                                                             "number of bytes or one like 512M, 20G")  # fmt: skip
    assert run_cli("logs", "prune", db=db).returncode == 2


def test_age_alone_removes_only_folders_last_written_before_it(store: Store, tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 4, 2)
    ids = [
        store.create_bisect(str(history.path), history.shas[0], history.shas[-1], {}, datetime.now(UTC))
        for _ in range(2)
    ]
    for bisect_id, hours in zip(ids, (50, 2), strict=True):
        store.set_status(bisect_id, BisectStatus.FAILED, finished=datetime.now(UTC))
        folder = log_dir(store.identity, bisect_id)
        folder.mkdir(parents=True)
        (folder / "step-1.log").write_text("x" * 100)
        age(folder, hours * 3600)
    removed = prune_logs(store, max_bytes=None, older_than_s=24 * 3600)
    assert [f.bisect_id for f in removed] == [ids[0]]
    assert [f.pruned for f in log_folders(store)] == [True, False]
