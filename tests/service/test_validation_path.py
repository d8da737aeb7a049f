"""One validation path: a value `bisect serve` refuses (tests/service/test_serve_edges.py) is refused by `bisect
start`'s flags and by bisect.toml with the same rule, in one line and exit 2, nothing stored; and the commands of the
`dashboard` extra say how to install it when it is missing, while the client (`bisect submit`) needs none of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from bisect_helpers import cli_env, run_cli, stored_rows
from synthetic import SyntheticHistory, culprit_history

pytestmark = pytest.mark.xdist_group("service")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> SyntheticHistory:
    return culprit_history(tmp_path_factory.mktemp("paths") / "repo", 8, 5)


def start(history: SyntheticHistory, *extra: str, db: Path) -> subprocess.CompletedProcess[str]:
    args = ["start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main", "--run", "bash test.sh"]
    return run_cli(*args, *extra, db=db, env={**cli_env(db), "BISECT_GPUS": "0"})


def assert_refused(done: subprocess.CompletedProcess[str], message: str, db: Path) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("bisect: error: ")
    assert message in done.stderr
    assert stored_rows(db, "select count(*) from bisects") in ([], [(0,)])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--", "/etc"], "paths: '/etc' is outside the repository"),
        (["--", "src/../../x"], "paths: 'src/../../x' is outside the repository"),
        (["--", ":(bogus)a"], "paths: ':(bogus)a': pathspec magic is not supported"),
        (["--gpus-per-step", "1000"], "--gpus-per-step must be 64 or fewer (got 1000)"),
    ],
)
def test_flags_meet_the_rules_the_api_meets(
    tmp_path: Path, history: SyntheticHistory, flags: list[str], message: str
) -> None:
    db = tmp_path / "b.db"
    assert_refused(start(history, *flags, db=db), message, db)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('paths = ["/etc"]', "bisect.toml: paths: '/etc' is outside the repository"),
        ("gpus_per_step = 1000", "bisect.toml: --gpus-per-step must be 64 or fewer (got 1000)"),
    ],
)
def test_bisect_toml_meets_the_rules_the_api_meets(
    tmp_path: Path, history: SyntheticHistory, toml: str, message: str
) -> None:
    (history.path / "bisect.toml").write_text(toml + "\n")
    db = tmp_path / "b.db"
    try:
        assert_refused(start(history, db=db), message, db)
    finally:
        (history.path / "bisect.toml").unlink()


def without_fastapi(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`bisect ARGS` in a Python whose import of fastapi fails, as where the dashboard extra is not installed."""
    code = "import sys; sys.modules['fastapi'] = None; from bisector.cli import main_entry; main_entry()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize("command", [["serve", "--allow-repo", "."], ["dashboard"]])
def test_the_servers_without_the_dashboard_extra_say_how_to_install_it(tmp_path: Path, command: list[str]) -> None:
    done = without_fastapi(*command, "--port", "0", env=cli_env(tmp_path / "b.db", BISECT_TOKEN="t"))
    assert done.returncode == 2
    assert done.stderr == (
        f"bisect: error: bisect {command[0]} needs the dashboard extra: pip install 'gpu-bisect[dashboard]'\n"
    )


def test_the_client_needs_no_dashboard_extra(tmp_path: Path, history: SyntheticHistory) -> None:
    nowhere = "http://127.0.0.1:9"  # the discard port: nothing listens there
    args = ["--server", nowhere, "--repo", str(history.path), "--good", history.shas[0], "--bad", "main"]
    for command in (["submit", *args], ["status", "1", "--server", nowhere]):
        done = without_fastapi(*command, env=cli_env(tmp_path / "b.db", BISECT_TOKEN="t"))
        assert done.returncode == 2
        assert done.stderr.startswith(f"bisect: error: cannot reach {nowhere}"), done.stderr
