"""The store a served test's `bisect serve` uses, per backend: a SQLite file, or a fresh PostgreSQL database on the
server $BISECT_TEST_POSTGRES_URL names (skipped when it is unset, outside CI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_helpers import BACKENDS, fresh_postgres_database


def backend_url(backend: str, directory: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'bisect.db'}"
        return
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture(scope="module", params=BACKENDS)
def module_store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One store for a module's tests (they share one server)."""
    yield from backend_url(request.param, tmp_path_factory.mktemp("store"))


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from backend_url(request.param, tmp_path)
