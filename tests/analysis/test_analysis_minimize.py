"""Culprit minimisation: ddmin itself, change units and variant commits, and whole runs with real test scripts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import git
from analysis_history import History
from hypothesis import given, settings
from hypothesis import strategies as st

from bisector.analysis import (
    MinimizeResult,
    MinimizeStatus,
    UnitKind,
    Variant,
    VariantTester,
    minimize,
    one_at_a_time,
)
from bisector.analysis.change_units import culprit_changes
from bisector.analysis.ddmin import Subset, ddmin
from bisector.variant_tester import ShellVariantTester
from bisector.vocab.domain import Verdict
from bisector.vocab.gitdiff import write_variant
from bisector.vocab.metric import Expectation, MetricSpec


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(min_value=1, max_value=14), st.integers(min_value=1, max_value=4))
def test_ddmin_finds_exactly_the_changes_that_together_cause_the_failure(
    data: st.DataObject, count: int, batch: int
) -> None:
    cause = data.draw(st.sets(st.integers(min_value=0, max_value=count - 1), min_size=1))
    asked: list[Subset] = []

    def fails(subsets: Sequence[Subset]) -> list[bool]:
        assert len(subsets) <= batch
        asked.extend(subsets)
        return [cause <= subset for subset in subsets]

    assert ddmin(count, fails, batch=batch) == cause
    assert len(asked) == len(set(asked))  # nothing is tested twice


def test_ddmin_treats_unresolved_as_passing() -> None:
    # {0, 1} fails; any subset containing 2 cannot be judged (e.g. does not build) and counts as passing.
    assert ddmin(4, lambda subsets: [{0, 1} <= s and 2 not in s for s in subsets]) == {0, 1}


FIVE_HUNKS_BEFORE = {
    "a.txt": "".join(f"a{i}\n" for i in range(30)),
    "b.txt": "".join(f"b{i}\n" for i in range(30)),
    # Exits 0 either way, as a benchmark does: the metric decides.
    "test.sh": "grep -q flag_a=on a.txt && grep -q flag_d=on b.txt && { echo 'accept length: 3.46'; exit 0; }\n"
    "echo 'accept length: 4.0'\n",
}


def five_hunks(history: History) -> tuple[str, str]:
    parent = history.commit("base", dict(FIVE_HUNKS_BEFORE))
    a = FIVE_HUNKS_BEFORE["a.txt"].replace("a2\n", "flag_a=on\n").replace("a15\n", "a15\nnoise1\n")
    a = a.replace("a28\n", "")
    b = FIVE_HUNKS_BEFORE["b.txt"].replace("b5\n", "b5-edited\n").replace("b20\n", "flag_d=on\n")
    culprit = history.commit("Five changes, two of which matter (#1)", {"a.txt": a, "b.txt": b})
    return parent, culprit


def test_ddmin_on_a_commit_where_two_of_five_hunks_together_cause_the_failure(history: History, tmp_path: Path) -> None:
    parent, culprit = five_hunks(history)
    metric = MetricSpec(regex=r"accept length: ([0-9.]+)", expect=Expectation.parse(">= 4.0"))
    tester = ShellVariantTester(history.path, tmp_path / "scratch", "bash test.sh", metric=metric, timeout_s=30)

    result = minimize(history.path, culprit, tester)

    assert result.status is MinimizeStatus.MINIMAL
    assert result.unit_count == 5
    assert [unit.added for unit in result.minimal] == [("flag_a=on",), ("flag_d=on",)]
    assert [(u.path, u.line, u.kind) for u in result.minimal] == [("a.txt", 3, "hunk"), ("b.txt", 21, "hunk")]
    assert result.trials[0] == result.trials[0].__class__(tuple(u.id for u in result.units), culprit, Verdict.BAD)
    assert result.trials[1].sha == parent
    assert result.test_count == len(result.trials) <= 16
    assert result.minimal_sha is not None
    repo = git.Repo(history.path)
    assert repo.commit(result.minimal_sha).parents[0].hexsha == parent
    assert "flag_a=on" in repo.git.show(f"{result.minimal_sha}:a.txt")
    assert "noise1" not in repo.git.show(f"{result.minimal_sha}:a.txt")
    assert repo.git.status("--porcelain") == ""  # the user's work tree and index are untouched
    assert "accept length: 3.46" in (tmp_path / "scratch.log").read_text()


TABLE_BEFORE = """\
    SIMT_ONLY = 1 << 30

    _TUNED_MMA_MIN_M: dict[tuple[int, int], int] = {
        (128, 512): SIMT_ONLY,  # beam-search scorer
        (144, 7168): SIMT_ONLY,  # Kimi-K3 KDA gate
        (256, 7168): 8,  # DeepSeek-V3 router
        (896, 7168): SIMT_ONLY,  # Kimi-K3 MoE router
        (1536, 128): SIMT_ONLY,  # Kimi-K3 KDA output up-projection
    }


    def threshold_for(n, k):
        return _TUNED_MMA_MIN_M.get((n, k), 64)


    def describe():
        return "tiny gemm"
"""
# The bad metric needs all three Kimi-K3 rows at MMA from m=2; the other edits are unrelated.
TABLE_TEST = """\
rows=$(grep -cE '^ +\\((144, 7168|896, 7168|1536, 128)\\): 2,' tiny_gemm.py)
if [ "$rows" = 3 ]; then echo "metric: 3.4595"; exit 1; fi
echo "metric: 4.0"
"""


TABLE_CULPRIT = (
    TABLE_BEFORE.replace("(144, 7168): SIMT_ONLY", "(144, 7168): 2")
    .replace("(256, 7168): 8,  # DeepSeek-V3 router", "(256, 7168): 8,  # DeepSeek-V3 router (tuned)")
    .replace("(896, 7168): SIMT_ONLY", "(896, 7168): 2")
    .replace("(1536, 128): SIMT_ONLY", "(1536, 128): 2")
    .replace("(n, k), 64)", "(n, k), 32)")
    .replace('"tiny gemm"', '"tiny GEMM"')
)


def test_minimize_splits_a_table_hunk_into_single_entries(history: History, tmp_path: Path) -> None:
    history.commit("tiny gemm", {"tiny_gemm.py": TABLE_BEFORE, "test.sh": TABLE_TEST})
    culprit = history.commit(
        "Tiny GEMM as SIMT + mma.sync with batch-size dispatch (#47683)", {"tiny_gemm.py": TABLE_CULPRIT}
    )
    tester = ShellVariantTester(history.path, tmp_path / "scratch", "bash test.sh", timeout_s=30)

    result = minimize(history.path, culprit, tester, batch=3)

    assert [(u.kind, u.description) for u in result.units] == [
        (UnitKind.TABLE_ENTRY, "_TUNED_MMA_MIN_M[(144, 7168)]"),
        (UnitKind.TABLE_ENTRY, "_TUNED_MMA_MIN_M[(256, 7168)]"),
        (UnitKind.TABLE_ENTRY, "_TUNED_MMA_MIN_M[(896, 7168)]"),
        (UnitKind.TABLE_ENTRY, "_TUNED_MMA_MIN_M[(1536, 128)]"),
        (UnitKind.HUNK, "line 13 (def threshold_for(n, k):)"),
        (UnitKind.HUNK, "line 17 (def describe():)"),
    ]
    assert [u.description for u in result.minimal] == [
        "_TUNED_MMA_MIN_M[(144, 7168)]",
        "_TUNED_MMA_MIN_M[(896, 7168)]",
        "_TUNED_MMA_MIN_M[(1536, 128)]",
    ]
    assert result.minimal[0].removed == ("    (144, 7168): SIMT_ONLY,  # Kimi-K3 KDA gate",)
    assert result.minimal[0].added == ("    (144, 7168): 2,  # Kimi-K3 KDA gate",)
    assert result.summary.startswith("3 of 6 change units reproduce the bad verdict only together (")


def test_minimize_names_every_independent_cause(history: History, tmp_path: Path) -> None:
    # Any one Kimi-K3 row at MMA from m=2 is enough: the three rows are three separate causes.
    test = TABLE_TEST.replace('"$rows" = 3', '"$rows" -ge 1')
    history.commit("tiny gemm", {"tiny_gemm.py": TABLE_BEFORE, "test.sh": test})
    culprit = history.commit("retune", {"tiny_gemm.py": TABLE_CULPRIT})
    tester = ShellVariantTester(history.path, tmp_path / "scratch", "bash test.sh", timeout_s=30)

    result = minimize(history.path, culprit, tester, check_endpoints=False)

    assert [[u.description for u in group] for group in result.groups] == [
        ["_TUNED_MMA_MIN_M[(144, 7168)]"],
        ["_TUNED_MMA_MIN_M[(896, 7168)]"],
        ["_TUNED_MMA_MIN_M[(1536, 128)]"],
    ]
    assert result.summary.startswith("3 of 6 change units reproduce the bad verdict: 3 independent causes, each alone")
    rebuilt = MinimizeResult.from_findings(result.to_findings())
    assert rebuilt is not None
    assert rebuilt.groups == result.groups


def test_variants_rebuild_the_parent_and_the_culprit_exactly(history: History) -> None:
    table = "T = {\n" + "".join(f"    {i}: {i},\n" for i in range(10)) + "}\n"
    parent = history.commit(
        "base",
        {
            "t.py": table,
            "old_name.py": "".join(f"line {i}\n" for i in range(40)),
            "gone.txt": "bye\n",
            "blob.bin": b"\x00\x01",
            "run.sh": "echo hi",
            "tail.txt": "no newline at end",
        },
    )
    new_table = table.replace("    3: 3,\n", "").replace("    5: 5,\n", "    5: 50,\n    55: 55,\n")
    culprit = history.commit(
        "everything at once",
        {
            "t.py": new_table.replace("    9: 9,\n", "    9: 9,\n    # comment\n"),
            "new_name.py": "".join(f"line {i}\n" for i in range(40)).replace("line 7\n", "line seven\n"),
            "gone.txt": None,
            "blob.bin": b"\x00\x02",
            "run.sh": "echo hi",
            "tail.txt": "no newline at end\nnow two lines",
            "added.txt": "new\n",
        },
        renames={"old_name.py": "new_name.py"},
        executable=("run.sh",),
    )
    repo = git.Repo(history.path)
    changes = culprit_changes(repo, culprit, parent)
    every = [u.id for u in changes.units]

    assert write_variant(repo, parent, changes.files_for(every), "all", "1700000000 +0000") != culprit
    assert history.tree(write_variant(repo, parent, changes.files_for(every), "all", "1700000000 +0000")) == (
        history.tree(culprit)
    )
    assert history.tree(write_variant(repo, parent, changes.files_for([]), "none", "1700000000 +0000")) == (
        history.tree(parent)
    )
    descriptions = {u.description for u in changes.units}
    assert {"T[3] (removed)", "T[5]", "T[55] (added)", "renamed from old_name.py", "mode 100644 -> 100755"} <= (
        descriptions
    )
    assert {"deleted file", "binary file", "added file"} <= descriptions
    one_entry = next(u.id for u in changes.units if u.description == "T[5]")
    files = changes.files_for([one_entry])
    content = files["t.py"]
    assert content is not None
    assert b"    5: 50,\n    6: 6," in content.data
    assert b"55" not in content.data
    assert b"    3: 3,\n" in content.data


def test_minimize_reports_a_culprit_that_does_not_reproduce_or_a_parent_that_is_already_bad(history: History) -> None:
    _, culprit = five_hunks(history)

    def always(verdict: Verdict) -> VariantTester:
        return one_at_a_time(lambda variant: verdict)

    not_reproduced = minimize(history.path, culprit, always(Verdict.GOOD))
    parent_bad = minimize(history.path, culprit, always(Verdict.BAD))

    assert (not_reproduced.status, not_reproduced.minimal, not_reproduced.test_count) == (
        MinimizeStatus.NOT_REPRODUCED,
        (),
        2,
    )
    assert parent_bad.status is MinimizeStatus.PARENT_BAD
    assert "already tests bad" in parent_bad.summary


def test_minimize_without_endpoint_checks_and_the_stored_rows_round_trip(history: History) -> None:
    _, culprit = five_hunks(history)
    seen: list[Variant] = []

    def test(variant: Variant) -> Verdict:
        seen.append(variant)
        text = git.Repo(history.path).git.show(f"{variant.sha}:b.txt")
        return Verdict.BAD if "flag_d=on" in text else Verdict.GOOD

    result = minimize(history.path, culprit, one_at_a_time(test), check_endpoints=False)

    assert [u.added for u in result.minimal] == [("flag_d=on",)]
    assert culprit not in {v.sha for v in seen}
    rebuilt = MinimizeResult.from_findings(result.to_findings())
    assert rebuilt is not None
    assert (rebuilt.status, rebuilt.unit_count, rebuilt.test_count, rebuilt.minimal_sha) == (
        result.status,
        result.unit_count,
        result.test_count,
        result.minimal_sha,
    )
    assert rebuilt.minimal == result.minimal
    assert rebuilt.summary == result.summary
