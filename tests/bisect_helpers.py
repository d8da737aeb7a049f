"""Helpers shared by the tests (imported by name: the tests directory is on sys.path)."""

from __future__ import annotations

from pathlib import Path

from bisector.spec import BisectSpec
from bisector.synthetic import BUILD_CMD, RUN_CMD


def synthetic_spec(repo: Path, good: str, bad: str, **overrides: object) -> BisectSpec:
    values: dict[str, object] = {
        "repo": str(repo),
        "good": good,
        "bad": bad,
        "run": RUN_CMD,
        "build": BUILD_CMD,
        "executor": "inprocess",
        "timeout_s": 60.0,
    }
    values.update(overrides)
    return BisectSpec(**values)  # type: ignore[arg-type]
