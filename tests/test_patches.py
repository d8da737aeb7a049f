"""`--cherry-pick REV` and `--patch FILE`: applied on every tested commit before its build and test, read once and
stored, a commit where they do not apply skipped with the reason (real repositories, real `bisect` processes)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from bisect_helpers import run_cli, stored_rows
from synthetic import write_files_history

from bisector.core.options import ImageMode
from bisector.core.spec import BisectSpec, CommitTest, ExecutorSpec
from bisector.runner.pipeline import step_request
from bisector.vocab.errors import ExecutorError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.images import ImageRecipe
from bisector.vocab.patches import Patch, PatchKind, patched_tree, read_patches
from bisector.workers.images.key import recipe_hash

TEST_SH = 'speed=$(cat speed.txt); echo "speed: $speed"; [ "$speed" -ge 8 ]\n'
METRIC = ["--metric", r"speed: ([0-9]+)", "--expect", ">= 8"]
# build.cfg reads "opt=old" until the build fix; the patch makes the build pass before it (commit 1 has another line)
BUILD = "grep -q opt=fixed build.cfg"
FIX = "--- a/build.cfg\n+++ b/build.cfg\n@@ -1 +1 @@\n-opt=old\n+opt=fixed\n"


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """0 good, 2 the culprit (speed 10 -> 5), 4 adds the test; build.cfg is "opt=old" but at commit 1."""
    path = tmp_path / "repo"
    shas = write_files_history(path, [
        {"speed.txt": "10\n", "build.cfg": "opt=old\n"},
        {"build.cfg": "opt=other\n"},
        {"speed.txt": "5\n", "build.cfg": "opt=old\n"},
        {"notes.txt": "b\n"},
        {"test.sh": TEST_SH},
        {"notes.txt": "c\n"},
    ])  # fmt: skip
    subprocess.run(["git", "-C", str(path), "branch", "with-test", shas[4]], check=True)
    return path, shas


def start(repo: Path, good: str, *extra: str, db: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "start", "--repo", str(repo), "--good", good, "--bad", "main", "--run", "bash test.sh", *METRIC,
        "--executor", "inprocess", "--no-explain", "--format", "json", *extra, db=db,
    )  # fmt: skip


def test_the_test_cherry_picked_onto_older_commits_finds_the_culprit(tmp_path: Path, repo) -> None:
    """The test exists only from commit 4 on: picked onto every commit (a clean merge where it exists already), the
    search finds commit 2. The branch named is stored as its SHA: moving it later changes nothing."""
    path, shas = repo
    done = start(path, shas[0], "--cherry-pick", "with-test", db=tmp_path / "b.db")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["status"], report["first_bad"]["sha"]) == ("found", shas[2])
    assert report["patches"] == [{"kind": "cherry-pick", "source": "with-test", "content": shas[4]}]
    assert report["reproduce"].split(" && ")[2] == f"git cherry-pick -n {shas[4]}"
    text = run_cli("report", "1", db=tmp_path / "b.db").stdout
    assert f"applied on every commit: --cherry-pick with-test ({shas[4][:12]})" in text
    log = run_cli("log", "1", db=tmp_path / "b.db").stdout.splitlines()
    applied = f"--cherry-pick with-test ({shas[4][:12]})"
    assert log[1] == f"# not replayable by plain git: gpu-bisect applied {applied} on every commit"
    subprocess.run(["git", "-C", str(path), "branch", "-f", "with-test", shas[0]], check=True)
    rerun = run_cli("run-at", "--bisect", "1", shas[1], db=tmp_path / "b.db")
    assert rerun.stdout.startswith(f"{shas[1][:12]}  good  metric 10"), rerun.stderr


def test_a_build_fix_patch_applies_where_it_can_and_skips_the_commit_where_it_cannot(tmp_path: Path, repo) -> None:
    """The build fails without the patch; at commit 1 the patch's context differs: that commit is skipped with the
    reason, in the step and the report. The file edited after the start changes no later run."""
    path, shas = repo
    fix = tmp_path / "fix.diff"
    fix.write_text(FIX)
    db = tmp_path / "b.db"
    done = start(path, shas[0], "--cherry-pick", shas[4], "--patch", str(fix), "--build", BUILD, db=db)
    report = json.loads(done.stdout)
    assert report["status"] == "ambiguous", done.stderr  # commit 1 untestable: the culprit is 1 or 2
    assert report["suspects"] == [shas[1], shas[2]]
    assert report["patches"][1] == {"kind": "patch", "source": str(fix), "content": FIX}
    skipped = [s for s in report["steps"] if s["verdict"] == "skip"]
    assert [s["sha"] for s in skipped] == [shas[1]]
    assert skipped[0]["reason"].startswith(f"--patch {fix} does not apply at {shas[1][:12]}: error: patch failed")
    assert {s["verdict"] for s in report["steps"] if s["sha"] != shas[1]} <= {"good", "bad"}  # the build passed
    assert f"--patch {fix} does not apply at {shas[1][:12]}" in run_cli("report", "1", db=db).stdout
    markdown = run_cli("report", "1", "--format", "markdown", db=db).stdout
    assert f"**Applied on every commit:** `--cherry-pick {shas[4][:12]}, --patch {fix}`" in markdown
    fix.write_text("not a patch any more\n")
    rerun = run_cli("run-at", "--bisect", "1", shas[2], db=db)
    assert rerun.stdout.startswith(f"{shas[2][:12]}  bad  metric 5"), rerun.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--patch", "missing.diff"], "--patch missing.diff: cannot read it (No such file or directory)"),
        (["--cherry-pick", "no-such-branch"], "--cherry-pick no-such-branch: no such commit in"),
        (["--patch", "{fix}"], "the patches apply at neither endpoint (at good: --patch {fix} does not apply at"),
    ],
)
def test_bad_patches_are_one_line_exit_2_and_store_nothing(tmp_path: Path, repo, flags, message) -> None:
    path, shas = repo
    fix = tmp_path / "fix.diff"
    fix.write_text(FIX.replace("opt=old", "opt=never"))
    db = tmp_path / "b.db"
    done = start(path, shas[0], *[f.format(fix=fix) for f in flags], db=db)
    assert done.returncode == 2
    assert done.stderr.startswith("bisect: error: " + message.format(fix=fix)), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert stored_rows(db, "select id from bisects") == []


def test_run_at_builds_a_patched_image_apart_from_the_unpatched_one(tmp_path: Path, repo) -> None:
    """An image of a patched tree is keyed by its patches: the run without them gets an image of its own, holding
    the commit's own tree; each run reuses its own image after."""
    path, shas = repo
    db = tmp_path / "b.db"
    fix = tmp_path / "fix.diff"
    fix.write_text(FIX)
    common = ["run-at", shas[0], "--repo", str(path), "--build", BUILD + " || exit 1", "--run", "cat build.cfg",
              "--image", "venv", "--executor", "inprocess", "--format", "json"]  # fmt: skip
    patched = json.loads(run_cli(*common, "--patch", str(fix), db=db).stdout)
    plain = json.loads(run_cli(*common, db=db).stdout)
    again = json.loads(run_cli(*common, "--patch", str(fix), db=db).stdout)
    assert patched["verdict"] == again["verdict"] == "good"
    assert "opt=fixed" in Path(patched["runs"][0]["log"]).read_text()
    assert plain["verdict"] == "skip"  # built without the fix: the build fails, in an image of its own
    assert patched["image"]["id"] != plain["image"]["id"]
    assert (again["image"]["id"], again["image"]["reused"]) == (patched["image"]["id"], True)


@pytest.mark.parametrize("image", [ImageMode.NONE, ImageMode.VENV])
def test_a_step_request_carries_its_patches_once(repo, image: ImageMode) -> None:
    """In the worktree the step applies them; on an image its recipe has them, for its key and its builder."""
    path, shas = repo
    patches = tuple(read_patches(GitRepo(path), [shas[4]], []))
    test = CommitTest(run="bash test.sh", patches=patches)
    spec = BisectSpec(repo=str(path), good=shas[0], bad=shas[-1], test=test, executor=ExecutorSpec(image=image))
    request = step_request(spec, bisect_id=1, step_id=1, sha=shas[1], attempt=1, repo=str(path),
                           metric=spec.metric_spec(), log_path="step.log")  # fmt: skip
    carried = [request.patches, request.image.patches if request.image else ()]
    assert carried == ([patches, ()] if image is ImageMode.NONE else [(), patches])
    if request.image is not None:
        with pytest.raises(ExecutorError, match="carries its patches in its image recipe only"):
            replace(request, patches=patches)


def test_the_image_key_holds_the_patches_in_order() -> None:
    one, two = Patch(PatchKind.DIFF, "a.diff", FIX), Patch(PatchKind.COMMIT, "main", "1" * 40)
    hashes = {recipe_hash("make", ImageRecipe(patches=patches)) for patches in [(), (one,), (one, two), (two, one)]}
    assert len(hashes) == 4


def test_a_patched_tree_is_made_without_touching_the_worktree(repo) -> None:
    path, shas = repo
    git = GitRepo(path)
    (path / "build.cfg").write_text("edited in the worktree\n")
    tree = patched_tree(git, shas[0], read_patches(git, [shas[4]], []))
    listing = subprocess.run(["git", "-C", str(path), "ls-tree", "--name-only", tree], capture_output=True, text=True)
    assert listing.stdout.split() == ["build.cfg", "speed.txt", "test.sh"]
    assert (path / "build.cfg").read_text() == "edited in the worktree\n"
    assert subprocess.run(["git", "-C", str(path), "status", "--short"], capture_output=True, text=True).stdout == (
        " M build.cfg\n"
    )
