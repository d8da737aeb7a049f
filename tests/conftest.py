from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bisector.db.store import Store


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own data dir (store, logs), cache dir (worktrees) and GPU lease dir, and no GPUs."""
    home = tmp_path / "bisect-home"
    monkeypatch.setenv("BISECT_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("BISECT_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("BISECT_GPUS", "")
    monkeypatch.setenv("BISECT_GPU_LOCK_DIR", str(home / "gpu-locks"))  # GPU leases of this test only
    monkeypatch.delenv("BISECT_DB", raising=False)
    return home


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{tmp_path / 'bisect.db'}") as opened:
        yield opened
