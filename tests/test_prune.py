"""--prune auto end to end: real git histories, the real probe hook in the test's Python processes, the in-process
and local executors, a real store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from synthetic import PRUNE_BENCH, culprit_history, prune_history, write_files_history

from bisector.core.prune import Reach
from bisector.core.records import SearchRecords
from bisector.core.spec import BisectSpec
from bisector.db.store import Store
from bisector.report.json_report import report_json
from bisector.report.model import BisectReport
from bisector.report.pruning import pruned_why, pruning_lines
from bisector.runner.coordinator import Coordinator, prepare_bisect
from bisector.runner.observer import SilentObserver
from bisector.runner.prune_probe import probe_and_plan
from bisector.runner.side_runs import SideRunner
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus, StepPurpose

RUN = f"{sys.executable} bench.py"


def bisect(store: Store, repo: Path, good: str, bad: str, **options: object):
    values = {"repo": str(repo), "good": good, "bad": bad, "run": RUN, "executor": "inprocess", "timeout_s": 120.0,
              "explain": False, **options}  # fmt: skip
    return Coordinator(store, make_executor, poll_interval_s=0.05).start(BisectSpec.from_options(values))


def search_steps(store: Store, bisect_id: int) -> int:
    return sum(1 for s in store.steps(bisect_id) if s.purpose is StepPurpose.SEARCH)


@pytest.mark.parametrize(("workers", "repeat"), [(1, 1), (2, 1), (1, 3)])
def test_pruning_leaves_out_the_commits_the_test_cannot_see(tmp_path: Path, store: Store, workers: int, repeat: int):
    history = prune_history(tmp_path / "repo", 60, 6, 30)
    good, bad = history.shas[0], history.shas[-1]
    off = bisect(store, history.path, good, bad, workers=workers, repeat=repeat)
    auto = bisect(store, history.path, good, bad, workers=workers, repeat=repeat, prune="auto")
    assert off.first_bad == auto.first_bad == history.shas[30]
    assert search_steps(store, auto.id) < search_steps(store, off.id)
    plan = SearchRecords.from_extra(auto.extra).pruning
    assert plan is not None
    assert plan.applied
    assert len(plan.removed()) == 54  # everything but the 6 commits that change stack/core.py
    assert plan.commits[history.shas[30]].reach is Reach.EXECUTED_LINES
    assert [s.purpose for s in store.steps(auto.id)].count(StepPurpose.PROBE) == 1
    report = report_json(BisectReport.load(store, auto.id))
    pruning = report["pruning"]
    assert isinstance(pruning, dict)
    assert len(pruning["commits"]) == 60
    assert report["side_runs"]["probe"] == 1  # type: ignore[index]


def test_a_culprit_in_a_json_file_the_test_reads_is_found(tmp_path: Path, store: Store):
    history = prune_history(tmp_path / "repo", 40, 8, 25, culprit_file="limits")
    record = bisect(store, history.path, history.shas[0], history.shas[-1], executor="local", prune="auto")
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[25])
    plan = SearchRecords.from_extra(record.extra).pruning
    assert plan is not None
    assert plan.applied
    assert plan.commits[history.shas[25]].reach is Reach.SEEN_FILES
    assert plan.commits[history.shas[25]].paths == ("stack/limits.json",)


def test_a_test_the_probe_cannot_follow_runs_unpruned_and_says_so(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 12, 7)  # bash test.sh: no Python process to follow
    record = bisect(store, history.path, history.shas[0], history.shas[-1], run="bash test.sh", prune="auto")
    assert record.first_bad == history.shas[7]
    plan = SearchRecords.from_extra(record.extra).pruning
    assert plan is not None
    assert not plan.applied
    assert "followed no Python process" in plan.note
    assert any("not pruned" in line for line in pruning_lines(BisectReport.load(store, record.id)))


def test_a_test_in_a_container_image_runs_no_probe_and_the_plan_names_the_image(tmp_path: Path, store: Store):
    history = culprit_history(tmp_path / "repo", 6, 3)
    good, bad = history.shas[0], history.shas[-1]
    spec = BisectSpec.from_options({"repo": str(history.path), "good": good, "bad": bad, "run": RUN,
                                    "image_template": "registry.example/app:{short}", "prune": "auto"})  # fmt: skip
    record = store.get_bisect(prepare_bisect(store, spec))

    def no_probe_run(probe_spec: BisectSpec) -> SideRunner:
        raise AssertionError("the probe ran in a container image, which its hook does not reach")

    plan = probe_and_plan(store, no_probe_run, record, SilentObserver())
    assert not plan.applied
    image = f"registry.example/app:{bad[:12]}"
    assert plan.note.startswith(f"not pruned: the test runs in container image {image}, which the probe's hook")


def test_coverage_that_cannot_run_in_the_tests_python_leaves_the_search_unpruned(tmp_path: Path, store: Store):
    history = prune_history(tmp_path / "repo", 20, 4, 10)
    broken = tmp_path / "site"
    (broken / "coverage").mkdir(parents=True)
    (broken / "coverage" / "__init__.py").write_text("raise RuntimeError('this coverage is broken')\n")
    record = bisect(store, history.path, history.shas[0], history.shas[-1], prune="auto",
                    env={"PYTHONPATH": str(broken)})  # fmt: skip
    assert record.first_bad == history.shas[10]
    plan = SearchRecords.from_extra(record.extra).pruning
    assert plan is not None
    assert not plan.applied
    assert "coverage.py could not run" in plan.note
    assert "this coverage is broken" in plan.note


def test_a_probe_that_fails_leaves_the_search_unpruned(tmp_path: Path, store: Store):
    history = prune_history(tmp_path / "repo", 20, 4, 10)
    record = bisect(store, history.path, history.shas[0], history.shas[-1], prune="auto",
                    run=f"test \"$BISECT_STEP_ID\" != 1 || exit 125; {RUN}")  # fmt: skip
    assert record.first_bad == history.shas[10]
    plan = SearchRecords.from_extra(record.extra).pruning
    assert plan is not None
    assert not plan.applied
    assert "the probe at the bad commit did not complete" in plan.note


def test_commits_with_the_same_visible_tree_share_one_verdict(tmp_path: Path, store: Store):
    fast, slow = "def speed():\n    return 10\n", "def speed():\n    return 3\n"
    base = {"bench.py": PRUNE_BENCH, "stack/__init__.py": "", "stack/limits.json": '{"min_speed": 5}\n',
            "stack/core.py": fast, "docs/index.md": "docs\n"}  # fmt: skip
    commits: list[dict[str, str | None]] = [base, {"stack/core.py": fast + "# tuned\n"}, {"docs/a.md": "x\n"},
                                            {"stack/core.py": fast}, {"docs/b.md": "y\n"}, {"stack/core.py": slow},
                                            {"docs/c.md": "z\n"}]  # fmt: skip
    shas = write_files_history(tmp_path / "repo", commits)
    record = bisect(store, tmp_path / "repo", shas[0], shas[-1], prune="auto")
    assert record.first_bad == shas[5]
    plan = SearchRecords.from_extra(record.extra).pruning
    assert plan is not None
    assert plan.applied
    assert plan.commits[shas[3]].same_as == shas[0]  # restores good's stack/core.py
    assert plan.commits[shas[3]].reach is Reach.SEEN_FILES
    assert plan.commits[shas[4]].same_as == shas[0]
    report = BisectReport.load(store, record.id)
    assert "the test sees the same tree as at" in pruned_why(report, shas[3])
    assert f"verdict of {shas[1][:12]}" in pruned_why(report, shas[2])
    assert not {shas[2], shas[3], shas[4]} & {s.sha for s in store.steps(record.id)}


def test_a_queued_bisect_is_pruned_when_its_coordinator_first_runs_it(tmp_path: Path, store: Store):
    """The service and `bisect replay` store a bisect first (prepare_bisect) and run it later (resume / run): the
    probe runs then, once, before the first search step."""
    history = prune_history(tmp_path / "repo", 40, 4, 20)
    values = {"repo": str(history.path), "good": history.shas[0], "bad": history.shas[-1], "run": RUN,
              "executor": "inprocess", "timeout_s": 120.0, "explain": False, "prune": "auto"}  # fmt: skip
    coordinator = Coordinator(store, make_executor, poll_interval_s=0.05)
    queued = prepare_bisect(store, BisectSpec.from_options(values))
    record = coordinator.resume(queued)  # as the service's scheduler runs a job
    assert record.first_bad == history.shas[20]
    plan = SearchRecords.from_extra(record.extra).pruning
    assert plan is not None
    assert plan.applied
    assert len(plan.removed()) == 36
    replayed = coordinator.run(prepare_bisect(store, BisectSpec.from_options(values)))  # as `bisect replay` does
    assert SearchRecords.from_extra(replayed.extra).pruning is not None
    for bisect_id in (record.id, replayed.id):
        assert [s.purpose for s in store.steps(bisect_id)].count(StepPurpose.PROBE) == 1
