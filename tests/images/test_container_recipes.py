"""A container image gpu-bisect builds is reused only for the build it was made of: its tag holds the recipe's hash
(the spec's patches, env and build, as a venv image's key does), so a bisect with patches never tests an image
built without them, nor the reverse. Real podman, real images, real bisects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisect_helpers import run_cli
from container_repo import BASE, METRIC, RUN, container_repo, podman_cmd
from image_repo import git

from bisector.workers.container_engine import BUILT_LABEL, built_reference

pytestmark = pytest.mark.containers

ONE_MORE = "echo $(( $(cat /stack/value) + 1 )) > /stack/built\n"  # the patched build: each value plus one


def _one_more_patch(repo: Path, into: Path) -> Path:
    """A patch file making the repository's build write each value plus one."""
    build = (repo / "build.sh").read_text()
    (repo / "build.sh").write_text(build.replace("cat /stack/value > /stack/built\n", ONE_MORE))
    patch = into / "one-more.patch"
    patch.write_text(git(repo, "diff") + "\n")
    git(repo, "checkout", "build.sh")
    return patch


def _bisect(repo: Path, good: str, template: str, db: Path, *extra: str) -> dict[str, object]:
    done = run_cli("start", "--repo", str(repo), "--good", good, "--bad", "main", "--run", RUN, *METRIC,
                   "--image-template", template, *extra, "--format", "json", db=db)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def _tested(report: dict[str, object]) -> dict[str, dict[str, object]]:
    steps = report["steps"]
    assert isinstance(steps, list)
    return {step["sha"]: step for step in steps if step["verdict"] in ("good", "bad")}


def test_a_patched_bisect_and_a_plain_one_of_the_same_commits_each_test_their_own_build(podman: str, tmp_path: Path):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10, 10, 10, 5, 5, 5))
    patch = _one_more_patch(repo, tmp_path)
    db = tmp_path / "b.db"

    patched = _bisect(repo, shas[0], podman, db, "--patch", str(patch))
    plain = _bisect(repo, shas[0], podman, db)
    again = _bisect(repo, shas[0], podman, db, "--patch", str(patch))

    for report in (patched, plain, again):
        assert report["first_bad"]["sha"] == shas[3]  # type: ignore[index]
    value = {sha: 10 if index < 3 else 5 for index, sha in enumerate(shas)}
    assert {sha: step["metric"] for sha, step in _tested(patched).items()} == {
        sha: value[sha] + 1 for sha in _tested(patched)
    }
    assert {sha: step["metric"] for sha, step in _tested(plain).items()} == {sha: value[sha] for sha in _tested(plain)}
    assert all(step["image"]["source"] == "built" for step in _tested(plain).values())  # none of the patched ones
    # the same patches again: the patched images are reused, never rebuilt nor mixed up with the plain ones
    assert {sha: (step["metric"], step["image"]["source"]) for sha, step in _tested(again).items()} == {
        sha: (value[sha] + 1, "cache") for sha in _tested(again)
    }
    built = podman_cmd("images", "--format", "{{.Tag}}", podman.partition(":")[0]).stdout.split()
    assert len(built) == 2 * len(set(_tested(patched)) | set(_tested(plain)))  # one image per commit and recipe


def _image_at(reference: str, value: int, into: Path, *label: str) -> None:
    """An image at reference whose build wrote value, made outside gpu-bisect (label: `--label K=V` to add)."""
    context = into / f"ctx-{value}"
    context.mkdir()
    (context / "Containerfile").write_text(f"FROM {BASE}\nRUN mkdir /stack && echo {value} > /stack/built\n")
    podman_cmd("build", "-q", *label, "-t", reference, str(context))


def test_the_templates_own_reference_serves_only_a_published_image_and_only_steps_without_patches(
    podman: str, tmp_path: Path
):
    repo = tmp_path / "repo"
    shas = container_repo(repo, (10, 10))
    patch = _one_more_patch(repo, tmp_path)
    _image_at(podman.format(short=shas[0][:12]), 3, tmp_path, "--label", f"{BUILT_LABEL}={shas[0]}")  # an old build
    _image_at(podman.format(short=shas[1][:12]), 7, tmp_path)  # published by a CI job

    def run_at(sha: str, *extra: str) -> tuple[object, object]:
        done = run_cli("run-at", sha, "--repo", str(repo), "--run", RUN, *METRIC, "--image-template", podman, *extra,
                       "--format", "json", db=tmp_path / "b.db")  # fmt: skip
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        return answer["metric"], answer["image"]["source"]

    assert run_at(shas[0]) == (10.0, "built")  # what an older gpu-bisect built there is of an unknown recipe
    assert run_at(shas[1]) == (7.0, "artifact")
    assert run_at(shas[1], "--patch", str(patch)) == (11.0, "built")  # the published one is not of the patched tree


@pytest.mark.parametrize(
    ("reference", "built"),
    [
        ("reg.example.org/stack:0a1b", "reg.example.org/stack:0a1b-bisect-R"),
        ("reg.example.org:5000/stack:0a1b", "reg.example.org:5000/stack:0a1b-bisect-R"),
        ("reg.example.org:5000/stack-0a1b", "reg.example.org:5000/stack-0a1b:latest-bisect-R"),  # a port, no tag
    ],
)
def test_the_built_reference_appends_the_recipe_to_the_tag(reference: str, built: str):
    assert built_reference(reference, "R") == built
