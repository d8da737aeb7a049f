"""Where the store lives and how to connect to it.

Several processes share one SQLite file: the coordinator writes while `bisect status` reads and
`bisect cancel` writes from another process. WAL lets readers run beside the writer, the busy timeout
makes a second writer wait instead of failing, and write transactions start with BEGIN IMMEDIATE
(see WRITE_OPTIONS) so that a read-then-write never dead-ends in SQLITE_BUSY.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from bisector.vocab.paths import data_dir

SQLITE_BUSY_TIMEOUT_S = 30.0
DB_FILE_NAME = "bisect.db"

# An execution option read by the SQLite "begin" listener: the engine returned by
# `engine.execution_options(**WRITE_OPTIONS)` starts its transactions with BEGIN IMMEDIATE.
_BEGIN_OPTION = "gpu_bisect_sqlite_begin"
WRITE_OPTIONS: dict[str, Any] = {_BEGIN_OPTION: "IMMEDIATE"}


def default_db_url() -> str:
    """$BISECT_DB (any SQLAlchemy URL or a file path), else the SQLite file bisect.db in data_dir()."""
    return db_url(os.environ.get("BISECT_DB") or f"sqlite:///{data_dir() / DB_FILE_NAME}")


def db_url(value: str) -> str:
    """A SQLAlchemy URL for what `--db` / $BISECT_DB says: a URL as it is, a plain path as its SQLite file."""
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().absolute()}"


def missing_sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names when it does not exist (None for other backends, memory, or a file there)."""
    parsed = make_url(db_url(url))
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or _is_sqlite_memory(parsed) or not database:
        return None
    path = _sqlite_file(database).expanduser().absolute()
    return None if path.exists() else path


def database_identity(url: URL) -> str:
    """Names one database whatever URL reached it: a SQLite file by its resolved path (the read-only open's
    `file:...?mode=ro` URI included), others by their URL without the password."""
    if url.get_backend_name() == "sqlite":
        return f"sqlite:{_sqlite_file(url.database or '').resolve()}"
    return url.render_as_string(hide_password=True)


def _sqlite_file(database: str) -> Path:
    """The file a SQLite URL's database part names: a plain path, or a `file:PATH?...` URI's path."""
    if database.startswith("file:"):
        database = unquote(database.removeprefix("file:").split("?", 1)[0])
    return Path(database)


def make_read_only_engine(url: str) -> Engine | None:
    """An engine that never writes, for commands that only read: a SQLite file is opened read-only (immutable
    where its directory cannot be written, as SQLite cannot keep its WAL index there). None for a SQLite file
    that does not exist yet or an in-memory database: the caller opens it the usual way."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    database = parsed.database
    if _is_sqlite_memory(parsed) or not database or database.startswith("file:"):
        return None
    path = Path(database).expanduser().absolute()
    if not path.is_file():
        return None
    uri = f"file:{quote(str(path))}?mode=ro"
    if not os.access(path.parent, os.W_OK):
        uri += "&immutable=1"
    engine = create_engine(
        parsed.set(database=uri, query={"uri": "true"}), connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}
    )
    event.listen(engine, "connect", _on_sqlite_read_only_connect)
    event.listen(engine, "begin", _on_sqlite_begin)
    return engine


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***, for messages; works on unparsable URLs too."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)
    return url if parsed.password is None else parsed.render_as_string(hide_password=True)


def make_engine(url: str) -> Engine:
    """An engine for url; SQLite files get their directory created, WAL, a busy timeout, foreign keys."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    connect_args: dict[str, Any] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
    if _is_sqlite_memory(parsed):
        # One shared connection, so that every thread sees the same (migrated) in-memory database;
        # the default pool would give each thread a fresh empty one.
        connect_args["check_same_thread"] = False
        engine = create_engine(parsed, connect_args=connect_args, poolclass=StaticPool)
    else:
        engine = create_engine(_prepare_sqlite_file(parsed), connect_args=connect_args)
    event.listen(engine, "connect", _on_sqlite_connect)
    event.listen(engine, "begin", _on_sqlite_begin)
    return engine


def _is_sqlite_memory(url: URL) -> bool:
    return url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"


def _prepare_sqlite_file(url: URL) -> URL:
    """Expand ~ and create the parent directory of a SQLite file (file: URIs are left as they are)."""
    database = url.database
    if not database or database.startswith("file:"):
        return url
    path = Path(database).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return url.set(database=str(path))


def _on_sqlite_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    # pysqlite's own transaction handling defers BEGIN until the first DML and commits before DDL;
    # turn it off and let _on_sqlite_begin emit BEGIN, so that transactions (and migrations) are real.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        # In WAL mode NORMAL still survives a crash of any process (kill -9 included); only a power loss
        # can drop the last commits. It saves an fsync per write: several per bisect step.
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _on_sqlite_read_only_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    dbapi_connection.isolation_level = None  # as _on_sqlite_connect; nothing here writes (no WAL switch)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    finally:
        cursor.close()


def _on_sqlite_begin(connection: Connection) -> None:
    mode = connection.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
    connection.exec_driver_sql(f"BEGIN {mode}")
