"""Stores filled by real bisects (real git repositories, real test processes) for the dashboard tests."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from synthetic import write_history

from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.runner.coordinator import Coordinator
from bisector.runner.wiring import make_executor

METRIC_REGEX = r"metric: ([0-9.]+)"
TEST_SCRIPT = """#!/usr/bin/env bash
python3 -c '
import sys, tuning
good = tuning.BLOCK["large"] == 128
print("metric: %s" % (10.0 if good else 5.0))
sys.exit(0 if good else 1)
'
"""


@dataclass(frozen=True)
class Filled:
    """The bisects of a filled store: ids, and the commits a test can check against."""

    log_dir: Path
    table_repo: Path
    table_shas: list[str]
    table_culprit: int
    found_id: int
    exit_code_id: int
    ambiguous_id: int
    ambiguous_range: tuple[str, str]  # last good, first bad


COMMITTED_LATER_S = 3 * 86400  # each commit's committer date: its author date plus this (as a rebase leaves them)


def table_history(path: Path, commits: int, culprit: int) -> list[str]:
    """commits+1 commits; commit `culprit` (by Dev <culprit % 3>) changes the table entry BLOCK["large"]."""
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    shas = []
    for index in range(commits + 1):
        author = f"Dev {index % 3}"
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": author,
            "GIT_AUTHOR_EMAIL": f"dev{index % 3}@example.com",
            "GIT_COMMITTER_NAME": author,
            "GIT_COMMITTER_EMAIL": f"dev{index % 3}@example.com",
            "GIT_AUTHOR_DATE": f"{1_700_000_000 + 60 * index} +0000",
            "GIT_COMMITTER_DATE": f"{1_700_000_000 + 60 * index + COMMITTED_LATER_S} +0000",
        }
        large = 256 if index >= culprit else 128
        (path / "tuning.py").write_text(f'BLOCK = {{"small": 64, "large": {large}}}\n')
        (path / "counter.txt").write_text(f"{index}\n")
        (path / "test.sh").write_text(TEST_SCRIPT)
        subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=env)
        subject = f"tune blocks (#{3000 + index})" if index == culprit else f"change {index} (#{3000 + index})"
        subprocess.run(["git", "commit", "-q", "-m", subject], cwd=path, check=True, env=env)
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True,
                                   text=True).stdout.strip())  # fmt: skip
    return shas


def spec(repo: Path, good: str, bad: str, **values: object) -> BisectSpec:
    values = {"repo": str(repo), "good": good, "bad": bad, "run": "bash test.sh", "executor": "inprocess", **values}
    return BisectSpec.from_options(values)


def fill_store(store: Store, root: Path) -> Filled:
    """Three real bisects (run with $BISECT_DATA_DIR at root/data, where the logs go): a found culprit that
    changes a table (with its explanation), the same range judged by exit code, and an ambiguous one (skipped
    commits beside the boundary) in another repository."""
    coordinator = Coordinator(store, make_executor, poll_interval_s=0.02)
    table_repo = root / "tables"
    culprit = 7
    shas = table_history(table_repo, 12, culprit)
    found = coordinator.start(
        spec(table_repo, shas[0], shas[-1], metric=METRIC_REGEX, expect=">= 8", workers=2, trace_kernels=False)
    )
    exit_code = coordinator.start(spec(table_repo, shas[0], shas[-1], explain=False))
    verdicts = ["good"] * 5 + ["skip", "skip", "bad"] + ["bad"] * 3
    history = write_history(root / "skips", verdicts)
    ambiguous = coordinator.start(
        spec(history.path, history.shas[0], history.shas[-1], build="bash build.sh", metric=METRIC_REGEX, expect=">= 8")
    )
    return Filled(
        log_dir=root / "data" / "logs",
        table_repo=table_repo,
        table_shas=shas,
        table_culprit=culprit,
        found_id=found.id,
        exit_code_id=exit_code.id,
        ambiguous_id=ambiguous.id,
        ambiguous_range=(history.shas[4], history.shas[7]),
    )
