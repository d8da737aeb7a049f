"""Alembic, driven from code: Store.open brings every database to head before using it.

Alembic is imported only when an existing database is behind head: every CLI command opens the store, and
importing Alembic costs about 0.1 s that an up-to-date database does not need. A new, empty database gets the
schema of `db/schema.py` at once and is stamped at head (tests/db checks that head's migrations give exactly
that schema), so a first bisect does not replay every migration either.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Column, Connection, Engine, MetaData, String, Table, inspect
from sqlalchemy.exc import SQLAlchemyError

from bisector.db.engine import WRITE_OPTIONS

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
HEAD_REVISION = "0012_submission_key"  # the newest file in migrations/versions; tests/db checks it is Alembic's head


def alembic_config(connection: Connection | None = None) -> Config:
    """A Config built in code (no alembic.ini, no logging setup); env.py migrates `connection`."""
    from alembic.config import Config

    config = Config(stdout=io.StringIO())
    # ConfigParser interpolates %, so a % in the path must be doubled.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade(engine: Engine) -> None:
    """Migrate the database to the newest revision, in one transaction; a no-op when it is there."""
    if at_head(engine):
        return
    with migration_connection(engine) as connection:
        if not inspect(connection).get_table_names():
            create_at_head(connection)
            return
        from alembic import command

        command.upgrade(alembic_config(connection), "head")


def create_at_head(connection: Connection) -> None:
    """The whole schema in an empty database, recorded as the newest revision (as `alembic stamp head`)."""
    from bisector.db.schema import metadata

    metadata.create_all(connection)
    version = Table("alembic_version", MetaData(), Column("version_num", String(32), primary_key=True))
    version.create(connection)
    connection.execute(version.insert().values(version_num=HEAD_REVISION))


def at_head(engine: Engine) -> bool:
    """Whether the database records exactly the newest revision (read without Alembic)."""
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql("SELECT version_num FROM alembic_version").fetchall()
    except SQLAlchemyError:  # no version table yet: a new database
        return False
    return [row[0] for row in rows] == [HEAD_REVISION]


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection in a write transaction, with foreign keys off on SQLite while it migrates.

    Batch migrations on SQLite copy a table and drop the old one; with foreign keys on, that DROP
    would delete (ON DELETE CASCADE) every candidate and step of the bisects. The references are
    checked before commit instead.
    """
    sqlite = engine.dialect.name == "sqlite"
    with engine.execution_options(**WRITE_OPTIONS).connect() as connection:
        if sqlite:
            _set_sqlite_foreign_keys(connection, enabled=False)
        try:
            with connection.begin():
                yield connection
                if sqlite:
                    _check_sqlite_foreign_keys(connection)
        finally:
            if sqlite:
                _set_sqlite_foreign_keys(connection, enabled=True)


def _set_sqlite_foreign_keys(connection: Connection, *, enabled: bool) -> None:
    # Only takes effect outside a transaction, so it goes to the driver, past SQLAlchemy's autobegin.
    driver_connection = connection.connection.driver_connection
    assert driver_connection is not None
    driver_connection.execute(f"PRAGMA foreign_keys = {'ON' if enabled else 'OFF'}").close()


def _check_sqlite_foreign_keys(connection: Connection) -> None:
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        table, rowid, parent, _ = broken[0]
        raise RuntimeError(f"migration left {len(broken)} broken references, e.g. {table} row {rowid} -> {parent}")
