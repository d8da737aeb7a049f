"""Alembic environment of the result store.

Called in two ways:
- from code (db/migrate.py, through Store.open): the connection to migrate is in
  config.attributes["connection"], already in a transaction; logging is left alone.
- by developers: `alembic -c db/alembic.ini revision --autogenerate -m "..."` or `... upgrade head`,
  against $BISECT_DB or the default data dir (db/engine.py), unless the ini sets sqlalchemy.url.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from bisector.db.engine import default_db_url, make_engine
from bisector.db.migrate import migration_connection
from bisector.db.schema import metadata

config = context.config


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline(url: str) -> None:
    context.configure(
        url=url,
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_from_command_line() -> None:
    if config.config_file_name is not None:
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    url = config.get_main_option("sqlalchemy.url") or default_db_url()
    if context.is_offline_mode():
        run_migrations_offline(url)
        return
    engine = make_engine(url)
    try:
        with migration_connection(engine) as connection:
            run_migrations(connection)
    finally:
        engine.dispose()


given_connection = config.attributes.get("connection")
if given_connection is not None:
    run_migrations(given_connection)
else:
    run_from_command_line()
