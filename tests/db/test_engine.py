"""Where the store lives (BISECT_DB, BISECT_DATA_DIR, XDG_DATA_HOME) and how SQLite is set up."""

from __future__ import annotations

from pathlib import Path

import pytest

from bisector.db import data_dir, default_db_url
from bisector.db.engine import make_engine, mask_url


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("BISECT_DB", "BISECT_DATA_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_default_is_under_local_share(tmp_path: Path) -> None:
    assert data_dir() == tmp_path / "home" / ".local" / "share" / "gpu-bisect"
    assert default_db_url() == f"sqlite:///{tmp_path}/home/.local/share/gpu-bisect/bisect.db"


def test_xdg_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "gpu-bisect"
    assert default_db_url() == f"sqlite:///{tmp_path}/xdg/gpu-bisect/bisect.db"


@pytest.mark.parametrize("value", ["", "relative/dir"])
def test_empty_or_relative_xdg_data_home_is_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", value)
    assert data_dir() == tmp_path / "home" / ".local" / "share" / "gpu-bisect"


def test_bisect_data_dir_wins_over_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("BISECT_DATA_DIR", str(tmp_path / "mine"))
    assert data_dir() == tmp_path / "mine"
    assert default_db_url() == f"sqlite:///{tmp_path}/mine/bisect.db"


def test_relative_bisect_data_dir_is_made_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BISECT_DATA_DIR", "state")
    assert data_dir() == tmp_path / "state"


def test_bisect_db_wins_over_everything(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BISECT_DATA_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("BISECT_DB", "postgresql://bisect:secret@db.internal/bisect")
    assert default_db_url() == "postgresql://bisect:secret@db.internal/bisect"
    assert data_dir() == tmp_path / "mine"


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://bisect:secret@db/bisect", "postgresql://bisect:***@db/bisect"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
        ("sqlite:///file:/tmp/x.db?mode=ro&uri=true", "sqlite:///file:/tmp/x.db?mode=ro&uri=true"),
        ("not a url://u:secret@host", "not a url://u:***@host"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_sqlite_file_gets_its_directory_wal_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "bisect.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            pragma = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "busy_timeout", "foreign_keys")
            }
    finally:
        engine.dispose()
    assert path.exists()
    assert pragma == {"journal_mode": "wal", "busy_timeout": 30_000, "foreign_keys": 1}


def test_tilde_in_sqlite_path_is_expanded(tmp_path: Path) -> None:
    engine = make_engine("sqlite:///~/nested/bisect.db")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    finally:
        engine.dispose()
    assert (tmp_path / "home" / "nested" / "bisect.db").exists()


def test_a_plain_path_is_a_sqlite_file_and_a_url_stays_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bisector.db.engine import db_url

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert db_url("bisect.db") == f"sqlite:///{tmp_path}/bisect.db"
    assert db_url("~/stores/b.db") == f"sqlite:///{tmp_path}/home/stores/b.db"
    assert db_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert db_url("sqlite:///relative.db") == "sqlite:///relative.db"
    monkeypatch.setenv("BISECT_DB", "env.db")
    assert default_db_url() == f"sqlite:///{tmp_path}/env.db"
