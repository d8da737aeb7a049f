"""Alembic: Store.open builds the schema from nothing, quietly, and the head revision matches schema.py."""

from __future__ import annotations

import logging
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from bisector.db import Store
from bisector.db.engine import make_engine
from bisector.db.migrate import alembic_config, migration_connection
from bisector.db.schema import metadata
from bisector.vocab.errors import StoreError

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()


def sqlite_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def tables_and_indexes(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    conn.close()
    return rows


def alembic_version(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        versions = [row[0] for row in conn.execute("SELECT version_num FROM alembic_version")]
    conn.close()
    return versions


def test_open_creates_the_schema_from_nothing(db_url: str) -> None:
    path = sqlite_path(db_url)
    assert not path.parent.exists()
    Store.open(db_url).close()
    engine = make_engine(db_url)
    try:
        names = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert names == {"alembic_version", "bisects", "ranges", "candidates", "steps", "findings", "images", "jobs"}
    assert alembic_version(path) == [HEAD]


def test_second_open_is_a_no_op(db_url: str) -> None:
    with Store.open(db_url) as store:
        bisect_id = store.create_bisect("repo", "g" * 40, "b" * 40, {}, T0)
    before = tables_and_indexes(sqlite_path(db_url))
    with Store.open(db_url) as store:
        assert store.get_bisect(bisect_id).repo == "repo"
    assert tables_and_indexes(sqlite_path(db_url)) == before
    assert alembic_version(sqlite_path(db_url)) == [HEAD]


@pytest.mark.parametrize("made_by", ["migrations", "store_open"])
def test_head_matches_schema_py(db_url: str, made_by: str) -> None:
    """Every migration replayed from nothing, and a new store's schema made at once, both give schema.py."""
    sqlite_path(db_url).parent.mkdir(parents=True, exist_ok=True)
    engine = make_engine(db_url)
    try:
        if made_by == "migrations":
            with migration_connection(engine) as conn:
                command.upgrade(alembic_config(conn), "head")
        else:
            Store.open(db_url).close()
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            differences = compare_metadata(context, metadata)
    finally:
        engine.dispose()
    assert differences == []
    assert alembic_version(sqlite_path(db_url)) == [HEAD]


def test_indexes_for_dashboard_queries_exist(db_url: str) -> None:
    Store.open(db_url).close()
    engine = make_engine(db_url)
    try:
        inspector = inspect(engine)
        indexed = {
            table: {tuple(index["column_names"]) for index in inspector.get_indexes(table)}
            for table in ("bisects", "candidates", "steps")
        }
    finally:
        engine.dispose()
    assert {("created",), ("status", "created"), ("repo", "created")} <= indexed["bisects"]
    assert {("sha",)} <= indexed["candidates"]
    assert {("bisect_id", "id"), ("bisect_id", "verdict"), ("sha",), ("node", "started")} <= indexed["steps"]


def test_downgrade_to_base_and_back(db_url: str) -> None:
    Store.open(db_url).close()
    engine = make_engine(db_url)
    try:
        with migration_connection(engine) as conn:
            command.downgrade(alembic_config(conn), "base")
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
        with migration_connection(engine) as conn:
            command.upgrade(alembic_config(conn), "head")
    finally:
        engine.dispose()
    assert alembic_version(sqlite_path(db_url)) == [HEAD]


def test_open_prints_nothing_and_leaves_logging_alone(db_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    before = (root.level, list(root.handlers), logging.getLogger("alembic").level)
    Store.open(db_url).close()
    Store.open(db_url).close()
    assert (root.level, list(root.handlers), logging.getLogger("alembic").level) == before
    assert not logging.getLogger("sqlalchemy").disabled
    assert capfd.readouterr() == ("", "")


def test_database_of_a_newer_version_is_a_store_error(db_url: str) -> None:
    Store.open(db_url).close()
    with sqlite3.connect(sqlite_path(db_url)) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.close()
    with pytest.raises(StoreError) as raised:
        Store.open(db_url)
    message = str(raised.value)
    assert "\n" not in message
    assert db_url in message
    assert "9999" in message


def test_head_revision_constant_is_alembics_head():
    from bisector.db.migrate import HEAD_REVISION

    assert HEAD_REVISION == HEAD


def test_a_new_or_up_to_date_database_opens_without_importing_alembic(tmp_path: Path):
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'b.db'}"
    program = (
        "import sys\nfrom bisector.db import Store\n"
        f"with Store.open({url!r}) as store:\n    store.list_bisects()\n"
        "print('alembic' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    runs = [
        subprocess.run([sys.executable, "-c", program], cwd=root, capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    assert [run.stdout.strip() for run in runs] == ["False", "False"]  # made at head, then only read
    assert alembic_version(sqlite_path(url)) == [HEAD]
