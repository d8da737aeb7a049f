"""A fresh PostgreSQL database per test module on the server that $BISECT_TEST_POSTGRES_URL names.

The URL names a role that may CREATE DATABASE (e.g. postgresql+psycopg://bisect:bisect@127.0.0.1/postgres).
Unset, the PostgreSQL cases skip, except under CI=true where a missing server is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, make_url, text

POSTGRES_URL_VARIABLE = "BISECT_TEST_POSTGRES_URL"
BACKENDS = ("sqlite", pytest.param("postgresql", marks=pytest.mark.postgres))


def postgres_admin_url() -> str:
    url = os.environ.get(POSTGRES_URL_VARIABLE)
    if url:
        return url
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs ${POSTGRES_URL_VARIABLE}: .ci/run starts a PostgreSQL server and sets it")
    pytest.skip(f"${POSTGRES_URL_VARIABLE} is not set: no PostgreSQL server to test against")


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """The URL of a new empty database, dropped afterwards (with any connections left to it)."""
    admin_url = make_url(postgres_admin_url())
    name = f"bisect_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield admin_url.set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
