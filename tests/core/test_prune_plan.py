"""The classification of --prune auto (bisector/core/prune.py), on hand-made changes: pure, no git."""

from __future__ import annotations

from bisector.core.prune import DOC_SUFFIXES, PrunePlan, Reach, Visibility, plan_pruning
from bisector.vocab.gitrepo import PathChange

ABSENT = "0" * 40


def change(path: str, old: str = "a" * 40, new: str = "b" * 40, status: str = "M", tree: bool = False) -> PathChange:
    return PathChange(path, status, old, new, tree)


def test_commits_that_touch_nothing_seen_share_their_parents_verdict():
    changes = {
        "c1": [change("docs/a.md")],
        "c2": [change("core.py", "1" * 40, "2" * 40)],
        "c3": [change("other.py")],
        "bad": [change("core.py", "2" * 40, "3" * 40)],
    }
    plan = plan_pruning(["good", "c1", "c2", "c3", "bad"], changes, Visibility(frozenset({"core.py"})))
    assert plan.applied
    assert plan.commits["c1"].same_as == "good"
    assert plan.commits["c1"].reach is Reach.UNSEEN
    assert plan.commits["c2"].same_as is None
    assert plan.commits["c2"].reach is Reach.SEEN_FILES
    assert plan.commits["c3"].same_as == "c2"
    assert plan.removed() == {"c1", "c3"}
    assert "pruned 2 of 5 commits" in plan.note


def test_a_revert_shares_the_verdict_of_the_tree_it_restores():
    changes = {
        "c1": [change("core.py", "1" * 40, "2" * 40)],
        "c2": [change("core.py", "2" * 40, "1" * 40)],  # back to good's core.py
        "bad": [change("core.py", "1" * 40, "3" * 40)],
    }
    plan = plan_pruning(["good", "c1", "c2", "bad"], changes, Visibility(frozenset({"core.py"})))
    assert plan.commits["c2"].reach is Reach.SEEN_FILES
    assert plan.commits["c2"].same_as == "good"
    assert plan.removed() == {"c2"}


def test_files_added_to_a_listed_directory_and_build_inputs_are_seen():
    visibility = Visibility(frozenset(), listed=frozenset({"tuning"}), build_prefixes=("csrc/",))
    added = change("tuning/H100.json", ABSENT, "b" * 40, "A")
    edited_elsewhere = change("tuning/sub/x.json")
    assert visibility.reach(added) is Reach.SEEN_FILES
    assert visibility.reach(change("tuning/old.json", "a" * 40, ABSENT, "D")) is Reach.SEEN_FILES
    assert visibility.reach(edited_elsewhere) is Reach.UNSEEN
    assert visibility.reach(change("csrc/gemm.cu")) is Reach.BUILD_INPUTS
    assert visibility.reach(change("csrcx/gemm.cu")) is Reach.UNSEEN


def test_programs_the_probe_cannot_follow_make_every_non_python_file_visible():
    unfollowed = Visibility(frozenset(), unfollowed=True)
    assert unfollowed.reach(change("limits.txt")) is Reach.BUILD_INPUTS
    assert unfollowed.reach(change("other.py")) is Reach.UNSEEN
    assert unfollowed.reach(change("docs/a.md")) is Reach.UNSEEN
    with_build = Visibility(frozenset(), unfollowed=True, exempt=DOC_SUFFIXES)  # --build: Python files may be built
    assert with_build.reach(change("setup.py")) is Reach.BUILD_INPUTS


def test_executed_lines_rank_above_seen_files_and_the_endpoints_stay():
    changes = {"c1": [change("core.py", "1" * 40, "2" * 40)], "bad": [change("docs/a.md")]}
    visibility = Visibility(frozenset({"core.py"}), line_authors=frozenset({"c1"}))
    plan = plan_pruning(["good", "c1", "bad"], changes, visibility)
    assert plan.commits["c1"].reach is Reach.EXECUTED_LINES
    assert plan.commits["bad"].same_as is None  # unseen, but the bad endpoint is never left out


def test_the_same_tree_at_both_endpoints_means_the_probe_missed_something():
    changes = {"c1": [change("core.py", "1" * 40, "2" * 40)], "bad": [change("core.py", "2" * 40, "1" * 40)]}
    plan = plan_pruning(["good", "c1", "bad"], changes, Visibility(frozenset({"core.py"})))
    assert not plan.applied
    assert plan.removed() == set()
    assert "every commit is searched" in plan.note


def test_the_plan_reads_back_as_stored():
    changes = {"c1": [change("docs/a.md")], "bad": [change("core.py", "1" * 40, "2" * 40)]}
    plan = plan_pruning(["good", "c1", "bad"], changes, Visibility(frozenset({"core.py"})))
    assert PrunePlan.from_json(plan.to_json()) == plan
    assert PrunePlan.from_json({"applied": True}) is None


def test_a_file_renamed_later_in_the_range_keeps_its_earlier_changes_in_the_search():
    """The probe sees pkg/fast.py at the bad commit; c1 changed it while it was still pkg/slow.py, c2 renamed it."""
    changes = {
        "c1": [change("pkg/slow.py", "1" * 40, "2" * 40)],
        "c2": [change("pkg/slow.py", "2" * 40, ABSENT, "D"), change("pkg/fast.py", ABSENT, "2" * 40, "A")],
        "bad": [change("docs/a.md")],
    }
    plan = plan_pruning(["good", "c1", "c2", "bad"], changes, Visibility(frozenset({"pkg/fast.py"})))
    assert "c1" not in plan.removed()
    assert plan.commits["c1"].reach is Reach.SEEN_FILES
