"""The Alembic migrations on a real PostgreSQL server: from nothing to head, exactly schema.py, and back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from postgres_helpers import fresh_postgres_database
from sqlalchemy import inspect, text

from bisector.db import Store
from bisector.db.engine import make_engine
from bisector.db.migrate import alembic_config, migration_connection
from bisector.db.schema import metadata

pytestmark = pytest.mark.postgres

HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_postgres_database() as url:
        yield url


def test_open_migrates_to_head_and_matches_schema_py(postgres_url: str) -> None:
    Store.open(postgres_url).close()
    engine = make_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert [row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))] == [HEAD]
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
        assert set(inspect(engine).get_table_names()) == {"alembic_version", *metadata.tables}
    finally:
        engine.dispose()


def test_downgrade_to_base_and_back(postgres_url: str) -> None:
    Store.open(postgres_url).close()
    engine = make_engine(postgres_url)
    try:
        with migration_connection(engine) as conn:
            command.downgrade(alembic_config(conn), "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
    Store.open(postgres_url).close()
    engine = make_engine(postgres_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
    finally:
        engine.dispose()
