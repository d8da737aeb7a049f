"""The repository holds code and data, not lab notes: benchmark results stay in a git-ignored folder, and no test or
script is named after the work session or tuning round that wrote it (git keeps that history)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)


def test_benchmark_results_are_ignored_and_none_is_tracked() -> None:
    assert git("ls-files", "benchmarks/results").stdout == ""
    assert git("check-ignore", "-q", "benchmarks/results/bench_core.json").returncode == 0


def test_no_test_or_benchmark_is_named_after_a_session_or_a_round() -> None:
    files = git("ls-files", "tests", "benchmarks").stdout.splitlines()
    assert files, "git listed no file: the check would pass vacuously"
    named = [path for path in files if re.search(r"(session|round)_?\d", Path(path).name, re.IGNORECASE)]
    assert named == []
