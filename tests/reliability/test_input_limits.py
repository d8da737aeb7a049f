"""Limits checked where the input enters: flags and bisect.toml values of the wrong type, size or name are
refused with one line and exit 2, never coerced, and nothing is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from bisect_helpers import run_cli, stored_rows
from synthetic import culprit_history


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory):
    return culprit_history(tmp_path_factory.mktemp("limits") / "repo", 8, 5)


def start(history, *extra: str, db: Path):
    args = ["start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main", *extra]
    return run_cli(*args, "--run", "bash test.sh", db=db)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "10000"], "--workers must be between 1 and 256 (got 10000)"),
        (["--timeout", "nan"], "--timeout must be a positive number of seconds (got nan)"),
        (["--timeout", "inf"], "--timeout must be a positive number of seconds (got inf)"),
        (["--noise-band", "nan"], "--noise-band must be a number, 0 or more (got nan)"),
        (["--max-attempts", "100000"], "max_attempts must be between 1 and 100"),
        (["--env", "BAD KEY=1"], "--env 'BAD KEY=1': write KEY=VALUE, KEY of letters, digits and _"),
        (["--env", "$(reboot)=1"], "--env '$(reboot)=1': write KEY=VALUE"),
    ],
)
def test_flags_out_of_bounds_are_refused(tmp_path: Path, history, flags: list[str], message: str):
    db = tmp_path / "b.db"
    done = start(history, *flags, db=db)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert message in done.stderr
    assert stored_rows(db, "select count(*) from bisects") in ([], [(0,)])


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("timeout = true", "timeout must be a whole number or a number, not bool True"),
        ('workers = "3"', "workers must be a whole number, not str '3'"),
        ("repeat = 1.5", "repeat must be a whole number, not float 1.5"),
        ("env = { A = 1 }", "env: 'A' = int 1: names and values are strings"),
        ('env = { "A B" = "1" }', "--env 'A B': an environment variable's name is letters, digits and _"),
        ('resources = { H200 = "one" }', "resources: 'H200' = str 'one': the amount must be a number"),
        ("infra_patterns = [1]", "infra_patterns: int 1 is not a string (a regex)"),
        ("paths = [1]", "paths: int 1 is not a string (a path)"),
        ("explain = 1", "explain must be true or false, not int 1"),
        ("confirm = 0", "confirm must be true or false, not int 0"),
    ],
)
def test_bisect_toml_values_of_the_wrong_type_are_refused(tmp_path: Path, history, toml: str, message: str):
    config = history.path / "bisect.toml"
    config.write_text(f"[bisect]\n{toml}\n")
    try:
        db = tmp_path / "b.db"
        done = start(history, db=db)
    finally:
        config.unlink()
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert stored_rows(db, "select count(*) from bisects") in ([], [(0,)])
