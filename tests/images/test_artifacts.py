"""--artifact: a commit's prebuilt wheels installed into its image instead of running the build, where they exist;
the build where they do not. Real wheels built by pip from the repository's package, real uv installs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bisect_helpers import run_cli
from image_repo import commit, init_repo, pyproject

BUILD = """#!/usr/bin/env bash
set -e
echo "build at $(cat version)" >> "$BUILD_COUNTER"
uv pip install --quiet --offline --no-deps --no-build-isolation ./pkg
"""
RUN = """python -c "import artpkg; print('metric:', artpkg.VALUE)" """


def _repo(path: Path, values: tuple[int, ...]) -> list[str]:
    init_repo(path)
    shas = []
    for index, value in enumerate(values):
        files = {"version": f"{index}\n", "pkg/artpkg/__init__.py": f"VALUE = {value}\n"}
        if index == 0:
            files.update({"build.sh": BUILD, "pkg/pyproject.toml": pyproject("artpkg")})
        shas.append(commit(path, f"value {value}", files))
    return shas


def _wheel(repo: Path, sha: str, into: Path) -> None:
    """The wheel a CI job would publish for sha: the package as of that commit."""
    src = into.parent / f"src-{sha[:12]}"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(src), sha], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(into),
         str(src / "pkg")],
        check=True, capture_output=True,
    )  # fmt: skip


def test_a_commit_with_wheels_installs_them_and_one_without_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    repo = tmp_path / "repo"
    shas = _repo(repo, (10, 5))
    wheels = tmp_path / "wheels"
    _wheel(repo, shas[0], wheels / shas[0])  # only the first commit has published wheels
    counter = tmp_path / "builds.txt"
    counter.touch()
    monkeypatch.setenv("BUILD_COUNTER", str(counter))
    db = tmp_path / "bisect.db"

    def run_at(sha: str) -> dict[str, object]:
        done = run_cli("run-at", sha, "--repo", str(repo), "--build", "bash build.sh", "--run", RUN,
                       "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", "--executor", "inprocess",
                       "--artifact", f"{wheels}/{{sha}}", "--format", "json", db=db)  # fmt: skip
        assert done.returncode in (0, 3), done.stderr
        return json.loads(done.stdout)

    published = run_at(shas[0])
    assert (published["verdict"], published["metric"]) == ("good", 10.0)
    assert published["image"]["source"] == "artifact"
    assert counter.read_text() == ""  # no build ran
    unpublished = run_at(shas[1])
    assert (unpublished["verdict"], unpublished["metric"]) == ("bad", 5.0)
    assert unpublished["image"]["source"] == "built"
    assert counter.read_text() == "build at 1\n"
    again = run_at(shas[0])
    assert (again["image"]["source"], again["image"]["id"]) == ("cache", published["image"]["id"])


def test_an_artifact_template_with_another_field_or_without_images_is_refused(tmp_path: Path):
    repo = tmp_path / "repo"
    shas = _repo(repo, (10,))
    db = tmp_path / "bisect.db"
    for extra in (["--artifact", "/w/{commit}/"], ["--artifact", "/w/{sha}/", "--image", "none"]):
        done = run_cli("run-at", shas[0], "--repo", str(repo), "--run", RUN, *extra, db=db)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "--artifact" in done.stderr


def test_a_patched_commit_is_built_not_given_its_unpatched_wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A commit's published wheels were built from its own tree: with --patch the image must hold the patched build."""
    repo = tmp_path / "repo"
    shas = _repo(repo, (10,))
    wheels = tmp_path / "wheels"
    _wheel(repo, shas[0], wheels / shas[0])
    patch = tmp_path / "value.patch"
    patch.write_text(
        "--- a/pkg/artpkg/__init__.py\n+++ b/pkg/artpkg/__init__.py\n@@ -1 +1 @@\n-VALUE = 10\n+VALUE = 3\n"
    )
    counter = tmp_path / "builds.txt"
    counter.touch()
    monkeypatch.setenv("BUILD_COUNTER", str(counter))
    done = run_cli("run-at", shas[0], "--repo", str(repo), "--build", "bash build.sh", "--run", RUN,
                   "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", "--executor", "inprocess",
                   "--artifact", f"{wheels}/{{sha}}", "--patch", str(patch), "--format", "json",
                   db=tmp_path / "bisect.db")  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    step = json.loads(done.stdout)
    assert (step["verdict"], step["metric"], step["image"]["source"]) == ("bad", 3.0, "built")
    assert counter.read_text() == "build at 0\n"
