from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

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
LEFT_OUT = pytest.StashKey[Counter[str]]()
WORKER_LEFT_OUT = "bisect_left_out"
UNMARKED = ""


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


# What a run leaves out, said at its end: the groups -m deselected (the markers declared in pyproject.toml, each
# with what it needs) and the tests that skipped, by group and reason.


def _groups(config: pytest.Config) -> dict[str, str]:
    """Each declared marker and what it says a test of its group needs."""
    declared = (line.partition(":") for line in config.getini("markers"))
    return {name.strip(): needs.strip() for name, _, needs in declared}


def _marker_of(keywords: Iterable[str], groups: dict[str, str]) -> str | None:
    return next((name for name in groups if name in keywords), None)


def _group_of(nodeid: str, keywords: Iterable[str], groups: dict[str, str]) -> str:
    """The first declared marker a test carries, else its folder under tests/ (its module for a top-level one)."""
    parts = nodeid.split("::")[0].split("/")
    folder = parts[1] if len(parts) > 2 else Path(parts[-1]).stem.removeprefix("test_")
    return _marker_of(keywords, groups) or folder


def pytest_deselected(items: list[pytest.Item]) -> None:
    if not items:
        return
    config = items[0].config
    groups = _groups(config)
    left_out = config.stash.setdefault(LEFT_OUT, Counter())
    left_out.update(_marker_of(item.keywords, groups) or UNMARKED for item in items)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)  # an xdist worker: the controller reports
    if workeroutput is not None:
        workeroutput[WORKER_LEFT_OUT] = dict(session.config.stash.get(LEFT_OUT, Counter()))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """Every xdist worker collects and deselects the same tests: the first to finish tells the controller."""
    output = getattr(node, "workeroutput", {})
    if WORKER_LEFT_OUT in output and LEFT_OUT not in node.config.stash:
        node.config.stash[LEFT_OUT] = Counter(output[WORKER_LEFT_OUT])


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    groups = _groups(config)
    left_out = Counter(config.stash.get(LEFT_OUT, Counter()))
    skipped: Counter[tuple[str, str]] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        skipped[(_group_of(report.nodeid, report.keywords, groups), reason.removeprefix("Skipped: "))] += 1
    unmarked = left_out.pop(UNMARKED, 0)
    if not left_out and not skipped:
        return
    terminalreporter.write_sep("=", "left out of this run")
    if left_out:
        terminalreporter.write_line(f"not selected (-m {config.option.markexpr!r}; `-m GROUP` runs a group):")
        for group, count in sorted(left_out.items()):
            terminalreporter.write_line(f"  {group} ({count}): {groups[group]}")
        if unmarked:
            terminalreporter.write_line(f"  and {unmarked} in no group")
    if skipped:
        terminalreporter.write_line("skipped:")
        for (group, reason), count in sorted(skipped.items()):
            terminalreporter.write_line(f"  {group} ({count}): {reason}")
