"""`bisect run-at`, `bisect images ls|rm|prune` and a bisect with images, as a user runs them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from bisect_helpers import cli_env, run_cli, stored_rows
from image_repo import BUILD_CMD, RUN_CMD, commit, make_image_repo, run_at

pytestmark = pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)")
METRIC = ["--metric", r"metric: ([0-9.]+)", "--expect", ">= 8"]


def test_run_at_builds_once_then_reuses_and_stores_the_runs(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    db = tmp_path / "bisect.db"
    first = run_at(repo.path, repo.shas[0], db)
    assert (first["sha"], first["verdict"], first["metric"]) == (repo.shas[0], "good", 10.0)
    image = first["image"]
    assert isinstance(image, dict)
    assert (image["source"], image["reused"]) == ("built", False)
    assert image["build_s"] > 0

    second = run_at(repo.path, "main", db, "--repeat", "2")
    assert (second["verdict"], second["metric"], second["samples"]) == ("bad", 5.0, [5.0, 5.0])
    assert second["image"]["id"] != image["id"]

    again = run_at(repo.path, repo.shas[0], db)
    assert again["image"] == {**image, "source": "cache", "reused": True}
    rerun = run_cli("rerun", "1", repo.shas[0], db=db)  # the first run's build and test, on its image
    assert rerun.returncode == 0, rerun.stderr
    assert f"image {str(image['id'])[:12]} (cache)" in rerun.stdout
    steps = stored_rows(db, "SELECT bisect_id, purpose, verdict, image FROM steps ORDER BY id")
    assert [(row[0], row[1], row[2]) for row in steps] == [
        (1, "rerun", "good"), (2, "rerun", "bad"), (2, "rerun", "bad"), (3, "rerun", "good"), (1, "rerun", "good")
    ]  # fmt: skip
    assert json.loads(steps[3][3]) == again["image"]
    kinds = stored_rows(db, "SELECT extra, message FROM bisects")
    assert all(json.loads(extra)["kind"] == "adhoc" and message.startswith("ad hoc run") for extra, message in kinds)

    listed = run_cli("images", "ls", "--format", "json", db=db)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {row["id"] for row in rows} == {image["id"], second["image"]["id"]}
    assert all(set(row) >= {"id", "sha", "source", "size", "build_s", "last_used"} for row in rows)
    assert {row["sha"] for row in rows} == {repo.shas[0], repo.shas[2]}

    removed = run_cli("images", "rm", image["id"], db=db)
    assert removed.returncode == 0, removed.stderr
    rebuilt = run_at(repo.path, repo.shas[0], db)
    assert (rebuilt["image"]["id"], rebuilt["image"]["source"]) == (image["id"], "built")

    pruned = run_cli("images", "prune", "--max-size", "1", db=db)
    assert pruned.returncode == 0, pruned.stderr
    assert "removed 2 image(s)" in pruned.stdout
    assert json.loads(run_cli("images", "ls", "--format", "json", db=db).stdout) == []


def test_run_at_says_a_failed_image_build_failed_and_where_its_output_is(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", values=(10,))
    db = tmp_path / "bisect.db"
    build = "echo compiling lib.c; echo 'lib.c:3: error: expected ;' >&2; exit 3"
    args = ("run-at", "main", "--repo", str(repo.path), "--build", build, "--run", RUN_CMD, "--executor", "inprocess")
    for attempt in ("built", "cache"):  # the failed build, then the same failure reused from the image cache
        done = run_cli(*args, db=db)
        assert done.returncode == 3, (done.stdout, done.stderr)  # a skip: no verdict
        answer, log_line = done.stdout.splitlines()  # long paths are never wrapped
        log = log_line.removeprefix("  log ")
        assert "whose build failed" in answer, answer
        assert f"({attempt}, build" not in answer  # the words of an image that is ready
        assert f"(its output: {log})" in answer
        when = "after" if attempt == "built" else "in an earlier run"
        assert when in answer
        if attempt == "built":
            assert "lib.c:3: error: expected ;" in Path(log).read_text()
    stored = run_cli("run-at", "main", "--repo", str(repo.path), "--build", build, "--run", RUN_CMD,
                     "--executor", "inprocess", "--format", "json", db=db)  # fmt: skip
    image = json.loads(stored.stdout)["image"]
    assert (image["source"], image["status"]) == ("cache", "failed")
    report = run_cli("report", "1", db=db)
    assert report.returncode == 0, report.stderr
    assert f"{image['id'][:10]} build failed" in report.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", values=(10,))
    db = tmp_path / "bisect.db"
    cases = [
        ("run-at", "nosuchrev", "--repo", str(repo.path), "--run", RUN_CMD),
        ("run-at", "main", "--repo", str(repo.path)),  # no --run and no bisect.toml
        ("images", "rm", "0123456789abcdef"),
        ("images", "prune", "--older-than", "soon"),
        ("images", "prune", "--older-than", "30"),  # 30 what? Days meant would remove everything over 30 s old
        ("logs", "prune", "--older-than", "30"),
        ("images", "prune", "--max-size", "lots"),
        ("images", "prune"),
    ]
    for args in cases:
        done = run_cli(*args, db=db)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_bisect_whose_env_changes_the_build_never_tests_the_images_another_env_built(tmp_path: Path):
    """The spec's --env reaches the build: an image made under other values is another build of the commit."""
    repo = make_image_repo(tmp_path / "repo")  # values 10, 10, 5: the last commit is the first bad one
    db = tmp_path / "bisect.db"
    build = f'sed -i "s/return \\([0-9]*\\)/return \\1 + $OFFSET/" lib.c && {BUILD_CMD}'  # the offset is compiled in

    def bisect_with(offset: int) -> dict[str, Any]:
        done = run_cli("start", "--repo", str(repo.path), "--good", repo.shas[0], "--bad", "main", "--build", build,
                       "--run", RUN_CMD, *METRIC, "--image", "venv", "--executor", "inprocess", "--no-explain",
                       "--env", f"OFFSET={offset}", "--format", "json", db=db)  # fmt: skip
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    plain = bisect_with(0)
    assert plain["first_bad"]["sha"] == repo.shas[2]
    raised = bisect_with(5)  # 15, 15, 10: every commit is good
    assert raised["status"] == "endpoints_mismatch", raised["first_bad"]
    assert [s["metric"] for s in raised["steps"]] == [15.0, 10.0]
    assert all(s["image"]["source"] == "built" for s in raised["steps"])
    assert not {s["image"]["id"] for s in raised["steps"]} & {s["image"]["id"] for s in plain["steps"]}


def test_a_second_bisect_over_the_same_range_builds_nothing(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", values=(10, 10, 10, 5, 5))
    (repo.path / "bisect.toml").write_text(
        f'[bisect]\nbuild = "{BUILD_CMD}"\nrun = "{RUN_CMD}"\nimage = "venv"\nimage_inputs = ["lib.c", "build.sh"]\n'
    )
    db = tmp_path / "bisect.db"
    counter = tmp_path / "builds"
    args = ["start", "--repo", str(repo.path), "--good", repo.shas[0], "--bad", "main", *METRIC,
            "--executor", "local", "--format", "json"]  # fmt: skip
    env_args = {"BUILD_COUNTER": str(counter)}
    reports = []
    for _ in range(2):
        done = run_cli(*args, env=cli_env(db, **env_args))
        assert done.returncode == 0, done.stderr
        reports.append(json.loads(done.stdout))
    assert [r["first_bad"]["sha"] for r in reports] == [repo.shas[3], repo.shas[3]]
    builds = counter.read_text().splitlines()
    assert sorted(builds) == sorted(set(builds))  # each image built once, in the first bisect
    second_steps = [s for s in reports[1]["steps"] if s["verdict"] in ("good", "bad")]
    assert second_steps
    assert all(s["image"]["reused"] and s["image"]["source"] == "cache" for s in second_steps)
    first_images = {s["image"]["id"] for s in reports[0]["steps"] if s["image"]}
    assert {s["image"]["id"] for s in second_steps} <= first_images
    # The text report shows each step's image and where it came from.
    texts = [run_cli("report", str(r["id"]), env=cli_env(db, COLUMNS="240")).stdout for r in reports]
    image_id = second_steps[0]["image"]["id"][:10]
    assert " image " in texts[0], texts[0]
    assert f"{image_id} built" in texts[0] or " built " in texts[0], texts[0]
    assert f"{image_id} cache" in texts[1], texts[1]
    assert " built " not in texts[1], texts[1]


def test_a_failed_image_build_is_a_stored_skip_with_its_log_tail(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", values=(10, 10))
    broken = commit(repo.path, "break the build", {"broken": "yes\n"})
    fixed_bad = commit(repo.path, "fix the build, lower the value", {"lib.c": "int value(void) { return 5; }\n"},
                       remove=("broken",))  # fmt: skip
    db = tmp_path / "bisect.db"
    done = run_cli("start", "--repo", str(repo.path), "--good", repo.shas[0], "--bad", fixed_bad, "--build", BUILD_CMD,
                   "--run", RUN_CMD, *METRIC, "--image", "venv", "--executor", "inprocess", "--no-explain",
                   "--format", "json", db=db)  # fmt: skip
    report = json.loads(done.stdout)
    skipped = [s for s in report["steps"] if s["sha"] == broken]
    assert skipped, report["steps"]
    assert all(s["verdict"] == "skip" and "lib.c does not compile" in s["detail"] for s in skipped)
    rows = stored_rows(db, "SELECT sha, status, log_tail FROM images WHERE status = 'failed'")
    assert [(sha, status) for sha, status, _ in rows] == [(broken, "failed")]
    assert "lib.c does not compile" in rows[0][2]
    listed = json.loads(run_cli("images", "ls", "--format", "json", db=db).stdout)
    assert {(row["sha"], row["status"]) for row in listed} >= {(broken, "failed")}


def test_an_ad_hoc_run_is_listed_but_is_no_failed_bisect_and_no_statistic(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", values=(10,))
    db = tmp_path / "bisect.db"
    run_at(repo.path, "main", db, "--image", "none", "--run", "true")
    assert len(json.loads(run_cli("list", "--format", "json", db=db).stdout)) == 1
    assert json.loads(run_cli("list", "--status", "failed", "--format", "json", db=db).stdout) == []
    assert json.loads(run_cli("stats", "--format", "json", db=db).stdout)["groups"] == []
