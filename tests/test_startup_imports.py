"""What `bisect start` has imported by the time it submits its first step: nothing that only later stages,
other executors or other commands need.

Each of these costs start-up time on every bisect (GitPython ~60 ms, Alembic ~0.1 s, the analysis ~0.1 s), so the
modules are checked, not the time: a real `bisect start` in a subprocess, on a real repository and a real SQLite
store (new, then up to date), records `sys.modules` when the local executor gets its first step.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from bisect_helpers import cli_env
from synthetic import RUN_CMD, culprit_history

# Records the coordinator's modules at its first submit, then runs the CLI's own entry point. `python -c`, not a
# script: the fork server would import a script that is __main__ again.
CHILD = """
import json, sys
import bisector.workers.local

submit = bisector.workers.local.LocalExecutor.submit
snapshot = sys.argv[1]

def first_submit(self, request):
    if not hasattr(first_submit, "seen"):
        first_submit.seen = sorted(sys.modules)
        with open(snapshot, "w") as out:
            json.dump(first_submit.seen, out)
    return submit(self, request)

bisector.workers.local.LocalExecutor.submit = first_submit
import bisector.cli
sys.argv = ["bisect", *sys.argv[2:]]
bisector.cli.main_entry()
"""

# (module or package, why start-up must not import it)
NOT_BEFORE_THE_FIRST_STEP = (
    ("git", "GitPython: the coordinator and the workers run git themselves (vocab/gitrepo.py)"),
    ("alembic", "migrations: only a store behind head needs them (db/migrate.py)"),
    ("bisector.analysis", "the explanation comes after the verdict"),
    ("bisector.explain", "the explanation comes after the verdict"),
    ("bisector.report", "the report comes after the verdict"),
    ("bisector.triage", "another command's"),
    ("rich.syntax", "tracebacks and code listings: never printed by start"),
    ("rich.live", "the live table is shown on a terminal only"),
    ("bisector.workers.step", "steps run in the workers, not the coordinator"),
    (
        "bisector.workers.container",
        "a step's container runs in the workers (the spec reads container_engine's templates)",
    ),
    ("bisector.workers.container_image", "a step's container image is got in the workers"),
    ("regex", "output patterns run in the workers"),
    ("httpx", "only --notify and the service client need it"),
    ("ray", "another executor's"),
)


def imported(modules: list[str], name: str) -> list[str]:
    return [module for module in modules if module == name or module.startswith(f"{name}.")]


@pytest.fixture(scope="module")
def modules_at_first_submit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The coordinator's sys.modules at its first submit, for a new store and then for the same, up-to-date one."""
    work = tmp_path_factory.mktemp("startup")
    history = culprit_history(work / "repo", 8, 4)
    db = work / "store.db"
    env = cli_env(BISECT_GPUS="", BISECT_DATA_DIR=str(work / "data"), BISECT_CACHE_DIR=str(work / "cache"))
    found: dict[str, list[str]] = {}
    for store in ("new store", "existing store"):
        snapshot = work / f"{store}.json"
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(snapshot), "start", "--repo", str(work / "repo"),
             "--good", history.shas[0], "--bad", "HEAD", "--run", RUN_CMD, "--no-explain", "--workers", "1",
             "--format", "json", "--db", f"sqlite:///{db}"],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["first_bad"]["sha"] == history.shas[4]
        found[store] = json.loads(snapshot.read_text())
    return found


@pytest.mark.parametrize("store", ["new store", "existing store"])
def test_start_imports_nothing_it_needs_only_later(modules_at_first_submit: dict[str, list[str]], store: str):
    modules = modules_at_first_submit[store]
    assert {"bisector.runner.coordinator", "bisector.db.store"} <= set(modules)  # the snapshot is the coordinator's
    wrong = {f"{name} ({why})": imported(modules, name)[:5] for name, why in NOT_BEFORE_THE_FIRST_STEP}
    assert {name: found for name, found in wrong.items() if found} == {}


def test_the_server_client_imports_no_store() -> None:
    """The `--server` commands talk HTTP: their client imports neither the store nor SQLAlchemy (~0.3 s each)."""
    child = "import json, sys, bisector.cli, bisector.service.client; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = json.loads(done.stdout)
    assert {"bisector.service.client", "httpx"} <= set(modules)
    assert imported(modules, "sqlalchemy") + imported(modules, "bisector.db") == []
