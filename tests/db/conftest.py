"""Fixtures of the store tests: real SQLite files in tmp_path, PostgreSQL databases, and other processes."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from alembic import command
from postgres_helpers import BACKENDS, fresh_postgres_database

from bisector.db import Store
from bisector.db.engine import make_engine
from bisector.db.migrate import alembic_config, migration_connection

ROOT = Path(__file__).resolve().parents[2]

RunPython = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'bisect.db'}"


@pytest.fixture
def sqlite_store(db_url: str) -> Iterator[Store]:
    """For the tests of how processes share one SQLite file."""
    with Store.open(db_url) as opened:
        yield opened


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, db_url: str) -> Iterator[str]:
    """A database on each backend: the SQLite file db_url, and a fresh PostgreSQL database (tests/postgres_helpers);
    its URL with the password (Store.url masks it), for a test that opens more stores on it."""
    if request.param == "sqlite":
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)  # for a migration run first
        yield db_url
        return
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture
def migrate() -> Callable[..., None]:
    """Upgrade the store at a URL to an Alembic revision (downgrade with down=True)."""

    def run(url: str, revision: str, *, down: bool = False) -> None:
        engine = make_engine(url)
        try:
            with migration_connection(engine) as conn:
                (command.downgrade if down else command.upgrade)(alembic_config(conn), revision)
        finally:
            engine.dispose()

    return run


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store.open(store_url) as opened:
        yield opened


def _drop_root_file_powers() -> None:
    """In the child, before exec: as root, lose the powers that bypass file permissions."""
    pr_capbset_drop = 24
    cap_dac_override, cap_dac_read_search, cap_fowner = 1, 2, 3
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (cap_dac_override, cap_dac_read_search, cap_fowner):
        if libc.prctl(pr_capbset_drop, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def run_python() -> RunPython:
    """Run code in another Python process (with the repository importable); argv[1:] are args.

    honor_permissions=True makes file permissions apply even when the tests run as root (as in CI).
    """

    def run(
        code: str, *args: str, honor_permissions: bool = False, timeout_s: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        drop = honor_permissions and os.geteuid() == 0
        try:
            return subprocess.run(
                [sys.executable, "-c", textwrap.dedent(code), *args],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                timeout=timeout_s,
                preexec_fn=_drop_root_file_powers if drop else None,
            )
        except subprocess.SubprocessError as exc:
            if drop and "preexec_fn" in str(exc):
                pytest.skip("cannot drop root's file capabilities here")
            raise

    return run
