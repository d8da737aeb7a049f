"""A store per backend (SQLite file, fresh PostgreSQL database), filled once per module by real bisects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fill import Filled, fill_store
from postgres_helpers import BACKENDS, fresh_postgres_database

from bisector.db.store import Store


@pytest.fixture(scope="module", params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('store') / 'bisect.db'}"
        return
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture(scope="module")
def filled(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Filled:
    root = tmp_path_factory.mktemp("repos")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BISECT_DATA_DIR", str(root / "data"))
        patch.setenv("BISECT_CACHE_DIR", str(root / "cache"))
        patch.setenv("BISECT_GPUS", "")
        with Store.open(store_url) as store:
            return fill_store(store, root)
