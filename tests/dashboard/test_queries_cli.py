"""`bisect list`, `show`, `stats` over a store filled by real bisects, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fill import Filled

from bisector.cli import main
from bisector.db.store import Store
from bisector.vocab.cost import step_gpu_seconds


def bisect(store_url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env={"BISECT_DB": store_url, "COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def listed(store_url: str, *filters: str) -> list[dict]:
    code, out, err = bisect(store_url, "list", "--format", "json", *filters)
    assert code == 0, err
    return json.loads(out)


def test_list_is_newest_first_with_culprits_only_for_found(store_url: str, filled: Filled):
    rows = listed(store_url)
    assert [r["id"] for r in rows] == [filled.ambiguous_id, filled.exit_code_id, filled.found_id]
    by_id = {r["id"]: r for r in rows}
    culprit = filled.table_shas[filled.table_culprit]
    assert by_id[filled.found_id]["first_bad"] == culprit
    assert by_id[filled.found_id]["culprit_pr"] == 3000 + filled.table_culprit
    assert by_id[filled.found_id]["metric"] == "metric"
    assert by_id[filled.exit_code_id]["metric"] == "exit code"
    ambiguous = by_id[filled.ambiguous_id]
    assert ambiguous["status"] == "ambiguous"
    assert ambiguous["first_bad"] is None
    last_good, first_bad = filled.ambiguous_range
    assert ambiguous["range"] == [last_good, first_bad]
    assert ambiguous["culprit"] == f"range {last_good[:10]}..{first_bad[:10]}"
    assert all(r["steps"] > 0 and r["steps_running"] == 0 for r in rows)


def test_list_table_shows_a_range_not_a_culprit_for_an_ambiguous_bisect(store_url: str, filled: Filled):
    code, out, _ = bisect(store_url, "list", "--status", "ambiguous")
    assert code == 0
    last_good, first_bad = filled.ambiguous_range
    assert f"range {last_good[:10]}..{first_bad[:10]}" in out
    assert f" {first_bad[:12]} " not in out


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (["--status", "found"], ["exit_code_id", "found_id"]),
        (["--metric", "EXIT"], ["exit_code_id"]),
        (["--metric", "metric"], ["ambiguous_id", "found_id"]),
        (["--culprit", "#3007"], ["exit_code_id", "found_id"]),
        (["--culprit", "3008"], []),
        (["--limit", "1"], ["ambiguous_id"]),
        (["--since", "2999-01-01"], []),
        (["--since", "1d"], ["ambiguous_id", "exit_code_id", "found_id"]),
    ],
)
def test_list_filters(store_url: str, filled: Filled, filters: list[str], expected: list[str]):
    assert [r["id"] for r in listed(store_url, *filters)] == [getattr(filled, name) for name in expected]


def test_list_filters_by_culprit_sha_prefix_and_repo(store_url: str, filled: Filled):
    culprit = filled.table_shas[filled.table_culprit]
    assert [r["id"] for r in listed(store_url, "--culprit", culprit[:9].upper())] == [
        filled.exit_code_id,
        filled.found_id,
    ]
    assert [r["id"] for r in listed(store_url, "--repo", str(filled.table_repo), "--status", "ambiguous")] == []
    assert len(listed(store_url, "--repo", str(filled.table_repo))) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "--status", "done"], "status 'done': expected one of"),
        (["list", "--culprit", "xyz"], "culprit 'xyz'"),
        (["list", "--since", "last week"], "since 'last week'"),
        (["list", "--limit", "0"], "limit 0"),
        (["stats", "--since", "2026-13-01"], "since '2026-13-01'"),
        (["show", "999"], "no bisect with id 999"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(store_url: str, filled: Filled, args: list[str], message: str):
    code, out, err = bisect(store_url, *args)
    assert code == 2
    assert out == ""
    assert err.startswith("bisect: error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_show_has_the_report_and_each_step_with_its_log_tail(store_url: str, filled: Filled):
    code, out, err = bisect(store_url, "show", str(filled.found_id), "--format", "json", "--tail", "50")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["first_bad"]["sha"] == filled.table_shas[filled.table_culprit]
    search = [s for s in shown["steps"] if s["purpose"] == "search"]
    assert search
    assert all(s["log_tail"].startswith("# gpu-bisect step ") for s in search)
    decided = [s for s in search if s["verdict"] in ("good", "bad")]
    assert decided
    assert all(("metric: 5.0" if s["verdict"] == "bad" else "metric: 10.0") in s["log_tail"] for s in decided)
    code, out, _ = bisect(store_url, "show", str(filled.found_id), "--tail", "1")
    assert code == 0
    assert f"step {search[0]['id']}: {search[0]['sha'][:12]}" in out
    assert "first bad commit" in out


def test_stats_per_repository_and_metric(store_url: str, filled: Filled):
    code, out, err = bisect(store_url, "stats", "--format", "json")
    assert code == 0, err
    stats = json.loads(out)
    groups = {(g["repo"], g["metric"]): g for g in stats["groups"]}
    table = groups[(str(filled.table_repo), "metric")]
    assert (table["bisects"], table["found"], table["unclear_share"]) == (1, 1, 0.0)
    assert table["top_files"] == [{"file": "tuning.py", "bisects": 1}]
    assert table["top_tables"] == [{"table": "BLOCK", "bisects": 1}]
    author = f"Dev {filled.table_culprit % 3} <dev{filled.table_culprit % 3}@example.com>"
    assert table["top_authors"] == [{"author": author, "bisects": 1}]
    with Store.open(store_url) as store:
        record = store.get_bisect(filled.found_id)
        steps = store.steps(filled.found_id)
    took_s = (record.finished - record.created).total_seconds()
    assert table["median_time_to_culprit_s"] == pytest.approx(took_s, abs=0.001)  # stats keep milliseconds
    held_s = sum(step_gpu_seconds(s) for s in steps)
    assert table["gpu_hours"] == pytest.approx(held_s / 3600, abs=1e-6)
    skips = next(g for g in stats["groups"] if g["repo"] != str(filled.table_repo))
    assert (skips["found"], skips["unclear_share"], skips["top_files"]) == (0, 1.0, [])
    assert sum(week["bisects"] for week in stats["weekly"]) == 3
    code, out, _ = bisect(store_url, "stats", "--repo", str(filled.table_repo))
    assert code == 0
    assert "tuning.py (1)" in out
    assert "exit code" in out
