from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from bisector.db.store import Store

# CI draws the same examples every run, so a CI failure repeats; elsewhere Hypothesis explores, and a failure
# prints the blob that reproduces it (@reproduce_failure).
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "explore")

NOISE_SEED_VARIABLE = "BISECT_TEST_SEED"
DEFAULT_NOISE_SEED = 0


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


@pytest.fixture
def noise_seed() -> int:
    """The seed of a test's simulated noise: $BISECT_TEST_SEED, else a fixed one; printed, so a failure names it."""
    seed = int(os.environ.get(NOISE_SEED_VARIABLE, DEFAULT_NOISE_SEED))
    print(f"noise seed {seed} (rerun with {NOISE_SEED_VARIABLE}={seed})")
    return seed
