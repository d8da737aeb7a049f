"""Real image builds through the step runner: a uv venv, a C library compiled with ccache, reuse by key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from image_repo import commit, image_request, make_image_repo

from bisector.vocab.domain import ErrorKind, Verdict
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.metric import Expectation, MetricSpec
from bisector.workers.images.builder import SEED_PTH, make_venv, uv_binary
from bisector.workers.images.cache import RUNS, ImageCache, ImageManifest, ImageStatus, images_root
from bisector.workers.images.key import ImageRecipe, image_key
from bisector.workers.step import StepRunner, WorkerSlot

JSON_METRIC = MetricSpec(json_file="out.json", json_key="v", expect=Expectation.parse(">= 8"))
pytestmark = pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)")


def runner(tmp_path: Path) -> StepRunner:
    return StepRunner(WorkerSlot("w0", (), tmp_path / "worktree"))


def test_a_commit_is_built_once_and_its_image_reused(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    counter = tmp_path / "builds"
    slot = runner(tmp_path)

    first = slot.run(image_request(repo.path, repo.shas[0], tmp_path, 1, BUILD_COUNTER=str(counter)))
    assert first.verdict is Verdict.GOOD, first.detail
    assert first.samples == (10.0,)
    assert first.image is not None
    assert (first.image.source, first.image.reused, first.image.status) == ("built", False, "ready")
    assert first.build_s > 0
    assert first.image.size_bytes > 0

    again = slot.run(image_request(repo.path, repo.shas[0], tmp_path, 2, BUILD_COUNTER=str(counter)))
    # the next commit changed only files outside the recipe's inputs: same key, same image
    unchanged = slot.run(image_request(repo.path, repo.shas[1], tmp_path, 3, BUILD_COUNTER=str(counter)))
    for result in (again, unchanged):
        assert result.verdict is Verdict.GOOD, result.detail
        assert result.image is not None
        assert (result.image.id, result.image.source, result.image.reused) == (first.image.id, "cache", True)
        assert result.build_s < 1.0  # only the time it took to find the image ready
        assert result.image.build_s == first.image.build_s
    assert counter.read_text().splitlines() == ["build at 0"]

    changed = slot.run(image_request(repo.path, repo.shas[2], tmp_path, 4, BUILD_COUNTER=str(counter)))
    assert changed.verdict is Verdict.BAD
    assert changed.samples == (5.0,)
    assert changed.image is not None
    assert changed.image.id != first.image.id
    assert not changed.image.reused
    assert counter.read_text().splitlines() == ["build at 0", "build at 2"]


def test_the_whole_tree_is_the_key_when_the_recipe_names_no_inputs(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    whole = ImageRecipe("venv")
    keys = [image_key(str(repo.path), sha, "bash build.sh", whole).id for sha in repo.shas]
    assert len(set(keys)) == 3
    some = ImageRecipe("venv", ("lib.c",))
    narrow = [image_key(str(repo.path), sha, "bash build.sh", some).id for sha in repo.shas]
    assert narrow[0] == narrow[1] != narrow[2]
    assert image_key(str(repo.path), repo.shas[0], "bash build.sh --other", some).id != narrow[0]
    opened = GitRepo(repo.path)  # a worker's or the build-ahead process's handle: the same keys
    assert [image_key(str(repo.path), sha, "bash build.sh", some, opened).id for sha in repo.shas] == narrow


def test_an_adjacent_commit_compiles_through_the_shared_compiler_cache(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", values=(10, 10))
    slot = runner(tmp_path)
    whole_tree = ImageRecipe("venv")  # the README change makes a new image; lib.c is the same
    for step, sha in enumerate(repo.shas, start=1):
        result = slot.run(image_request(repo.path, sha, tmp_path, step, recipe=whole_tree))
        assert result.verdict is Verdict.GOOD
        assert result.image is not None
        assert not result.image.reused
    stats = subprocess.run(
        ["ccache", "--print-stats"], env={"CCACHE_DIR": str(images_root() / "ccache"), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    counts = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
    assert int(counts["direct_cache_hit"]) + int(counts["preprocessed_cache_hit"]) >= 1
    assert int(counts["cache_miss"]) == 1


def test_a_failed_build_is_kept_and_skips_without_rebuilding(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    broken = commit(repo.path, "break the build", {"broken": "yes\n"})
    counter = tmp_path / "builds"
    recipe = ImageRecipe("venv")
    slot = runner(tmp_path)

    first = slot.run(image_request(repo.path, broken, tmp_path, 1, recipe=recipe, BUILD_COUNTER=str(counter)))
    assert first.verdict is Verdict.SKIP
    assert "image build failed (exit 3)" in first.detail
    assert "lib.c does not compile" in first.detail
    assert first.image is not None
    assert first.image.status == "failed"
    manifest = ImageCache().manifest(first.image.id)
    assert manifest is not None
    assert manifest.status is ImageStatus.FAILED
    assert "lib.c does not compile" in manifest.log_tail

    second = slot.run(image_request(repo.path, broken, tmp_path, 2, recipe=recipe, BUILD_COUNTER=str(counter)))
    assert second.verdict is Verdict.SKIP
    assert f"bisect images rm {first.image.id}" in second.detail
    assert "lib.c does not compile" in second.detail
    assert counter.read_text().splitlines() == ["build at 2"]

    assert ImageCache().remove(first.image.id)
    third = slot.run(image_request(repo.path, broken, tmp_path, 3, recipe=recipe, BUILD_COUNTER=str(counter)))
    assert third.verdict is Verdict.SKIP
    assert len(counter.read_text().splitlines()) == 2


def test_a_build_failing_on_infrastructure_is_an_error_and_leaves_no_failed_image(tmp_path: Path):
    """A build that dies of the network (an infrastructure signature in its output) says nothing about the commit:
    an error to retry, not a failed image that would skip the commit in every later bisect."""
    repo = make_image_repo(tmp_path / "repo")
    counter = tmp_path / "builds"
    slot = runner(tmp_path)

    down = slot.run(image_request(repo.path, repo.shas[0], tmp_path, 1, BUILD_COUNTER=str(counter), NETWORK_DOWN="1"))
    assert (down.verdict, down.error_kind) == (Verdict.ERROR, ErrorKind.INFRA), down.detail
    assert "Connection refused" in down.detail
    assert not [m for m in ImageCache().manifests() if m.status is ImageStatus.FAILED]

    back = slot.run(image_request(repo.path, repo.shas[0], tmp_path, 2, BUILD_COUNTER=str(counter)))
    assert back.verdict is Verdict.GOOD, back.detail
    assert back.image is not None
    assert (back.image.source, back.image.reused) == ("built", False)
    assert counter.read_text().splitlines() == ["build at 0", "build at 0"]


def test_a_failed_image_whose_log_shows_an_infrastructure_signature_of_this_bisect_is_built_again(tmp_path: Path):
    """A failed image is one bisect's judgement of its build's log: a later bisect whose signatures say that log is
    infrastructure builds the commit again rather than skipping it on the earlier verdict."""
    repo = make_image_repo(tmp_path / "repo")
    slot = runner(tmp_path)
    no_signatures = image_request(repo.path, repo.shas[0], tmp_path, 1, NETWORK_DOWN="1")
    no_signatures = replace(no_signatures, metric=replace(no_signatures.metric, infra_patterns=()))
    first = slot.run(no_signatures)
    assert first.verdict is Verdict.SKIP, first.detail
    assert first.image is not None
    assert first.image.status == "failed"

    later = slot.run(image_request(repo.path, repo.shas[0], tmp_path, 2))  # the built-in signatures
    assert later.verdict is Verdict.GOOD, later.detail
    assert later.image is not None
    assert (later.image.id, later.image.source, later.image.reused) == (first.image.id, "built", False)
    assert "infrastructure" in (tmp_path / "logs" / "step-2.log").read_text()


# A compiler wrapper (gcc -wrapper) whose first compiler pass dies as the kernel's OOM killer ends one: SIGKILL
OOM_ONCE = """#!/bin/sh
if [ ! -e "$OOM_MARK" ]; then : > "$OOM_MARK"; kill -9 $$; fi
exec "$@"
"""


def test_a_build_whose_compiler_is_killed_is_an_error_and_leaves_no_failed_image(tmp_path: Path):
    """gcc exits 1 when a pass of its own is SIGKILLed (OOM) mid-build, and says so: that says nothing about the commit,
    so no failed image makes every later bisect skip it."""
    repo = make_image_repo(tmp_path / "repo")
    wrapper = tmp_path / "oom_once.sh"
    wrapper.write_text(OOM_ONCE)
    wrapper.chmod(0o755)
    env = {"CC": f"gcc -wrapper {wrapper}", "OOM_MARK": str(tmp_path / "oom-killed")}
    slot = runner(tmp_path)

    killed = slot.run(image_request(repo.path, repo.shas[0], tmp_path, 1, **env))
    assert (killed.verdict, killed.error_kind) == (Verdict.ERROR, ErrorKind.INFRA), killed.detail
    assert "Killed signal terminated program" in killed.detail
    assert not [m for m in ImageCache().manifests() if m.status is ImageStatus.FAILED]

    again = slot.run(image_request(repo.path, repo.shas[0], tmp_path, 2, **env))
    assert again.verdict is Verdict.GOOD, again.detail
    assert again.image is not None
    assert (again.image.source, again.image.reused) == ("built", False)


def test_the_size_cap_evicts_least_recently_used_images_not_in_use(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", values=(1, 2, 3))
    cache = ImageCache()
    slot = runner(tmp_path)
    tiny_cap = ImageRecipe("venv", max_bytes=1)  # every image is over it: only the newest and those in use stay
    ids = []
    for step, sha in enumerate(repo.shas[:2], start=1):
        result = slot.run(image_request(repo.path, sha, tmp_path, step, recipe=tiny_cap))
        assert result.samples == (step,)
        assert result.image is not None
        ids.append(result.image.id)
    assert cache.manifest(ids[0]) is None
    assert not cache.image_dir(ids[0]).exists()
    assert result.image.evicted == (ids[0],)

    with cache.lock(ids[1], shared=True):  # a step runs on it now
        third = slot.run(image_request(repo.path, repo.shas[2], tmp_path, 3, recipe=tiny_cap))
    assert third.samples == (3.0,)
    assert third.image is not None
    assert third.image.evicted == ()
    assert cache.manifest(ids[1]) is not None
    assert cache.evict(1, keep=frozenset({third.image.id})) == [ids[1]]
    assert [m.id for m in cache.manifests()] == [third.image.id]
    assert json.loads((cache.image_dir(third.image.id) / "manifest.json").read_text())["status"] == "ready"


def test_the_size_cap_counts_what_tests_wrote_into_an_image_after_its_build(tmp_path: Path):
    """Triton's and Inductor's caches live in the image and grow with every test run on it."""
    repo = make_image_repo(tmp_path / "repo", values=(1, 2))
    cache = ImageCache()
    slot = runner(tmp_path)
    first = slot.run(image_request(repo.path, repo.shas[0], tmp_path, 1))
    assert first.image is not None
    built = cache.manifest(first.image.id)
    assert built is not None
    triton = cache.image_dir(built.id) / "triton"
    triton.mkdir(exist_ok=True)
    (triton / "kernel.cubin").write_bytes(b"\0" * (4 << 20))  # as a test's compiled kernels would
    second = slot.run(image_request(repo.path, repo.shas[1], tmp_path, 2))
    assert second.image is not None
    newer = cache.manifest(second.image.id)
    assert newer is not None
    cap = built.size_bytes + newer.size_bytes + (1 << 20)  # both images as built fit; with the cubin they do not
    assert cache.evict(cap, keep=frozenset({second.image.id})) == [built.id]


def test_the_size_cap_sums_the_sizes_recorded_when_images_were_made_and_measures_those_without(tmp_path: Path):
    """An image's tree and venv are not walked at each eviction: their size is the one its manifest recorded when
    it was made. Triton's and Inductor's caches are measured, each private copy counts the image's size again, and
    an image with no recorded size is measured whole."""
    cache = ImageCache(tmp_path / "images")
    mib = 1 << 20

    def image(image_id: str, used: str, recorded: int, holds: int) -> str:
        (cache.image_dir(image_id) / "src").mkdir(parents=True)
        (cache.image_dir(image_id) / "src" / "lib.so").write_bytes(b"\0" * holds)
        when = f"2026-12-0{used}T00:00:00+00:00"
        ready = ImageManifest(image_id, {}, "repo", "a" * 40, cache.node, ImageStatus.READY, when, when)
        cache.write_manifest(replace(ready, size_bytes=recorded))
        return image_id

    oldest = image("a" * 16, "1", recorded=3 * mib, holds=1024)  # counted as recorded, not as it holds now
    unrecorded = image("b" * 16, "2", recorded=0, holds=2 * mib)
    in_use = image("c" * 16, "3", recorded=mib, holds=mib)
    (cache.image_dir(in_use) / "triton").mkdir()
    (cache.image_dir(in_use) / "triton" / "kernel.cubin").write_bytes(b"\0" * mib)
    (cache.image_dir(in_use) / RUNS / "run-1").mkdir(parents=True)  # a test's copy of its tree and venv
    keep = frozenset({in_use})  # 1 MiB as made + 1 MiB of Triton's cache + 1 MiB for its copy

    assert cache.evict(6 * mib, keep) == [oldest]  # 3 + 2 + 3 MiB: the least recently used goes first
    assert cache.evict(9 * mib // 2, keep) == [unrecorded]  # 2 + 3 MiB
    assert cache.evict(3 * mib, keep) == []
    assert [m.id for m in cache.manifests()] == [in_use]


def test_a_metric_file_left_by_an_earlier_run_on_the_image_is_not_judged_again(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    slot = runner(tmp_path)
    writes = "python -c \"import json; json.dump({'v': 10}, open('out.json', 'w'))\""
    first = slot.run(replace(image_request(repo.path, repo.shas[0], tmp_path, 1), run_cmd=writes, metric=JSON_METRIC))
    assert first.verdict is Verdict.GOOD, first.detail
    assert first.samples == (10.0,)
    silent = slot.run(replace(image_request(repo.path, repo.shas[0], tmp_path, 2), run_cmd="true", metric=JSON_METRIC))
    assert silent.image is not None
    assert silent.image.reused
    assert silent.samples == ()
    assert silent.verdict is Verdict.SKIP


def test_what_a_test_writes_stays_out_of_the_image_later_steps_run_on(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo")
    slot = runner(tmp_path)
    writes = 'mkdir out && echo $BISECT_STEP_ID > out/step && test "$BISECT_IMAGE_DIR" = "$PWD" && bash test.sh'
    results = [
        slot.run(replace(image_request(repo.path, repo.shas[0], tmp_path, step_id), run_cmd=writes))
        for step_id in (1, 2)
    ]
    assert [r.verdict for r in results] == [Verdict.GOOD, Verdict.GOOD], results[1].detail  # no `out` left by step 1
    assert results[0].image is not None
    assert results[1].image is not None
    assert results[1].image.reused
    image = ImageCache().image_dir(results[0].image.id)
    assert not (image / "src" / "out").exists()
    assert list((image / "runs").iterdir()) == []  # each test's copy went with its step


def _venv_files(venv: Path) -> dict[str, tuple[object, ...]]:
    """Each entry of a venv: its kind, mode and content (a link's target), its own folder's path written as VENV."""
    files: dict[str, tuple[object, ...]] = {}
    for path in sorted(venv.rglob("*")):
        name = str(path.relative_to(venv))
        if path.is_symlink():
            files[name] = ("link", os.readlink(path).replace(str(venv), "VENV"))
        elif path.is_file():
            files[name] = ("file", path.stat().st_mode, path.read_bytes().replace(str(venv).encode(), b"VENV"))
        else:
            files[name] = ("dir", path.stat().st_mode)
    return files


def test_an_image_s_venv_is_the_one_uv_makes_at_its_path_seeded_with_the_base_s_packages(tmp_path: Path):
    templates = tmp_path / "templates"
    first, second = tmp_path / "one" / "venv", tmp_path / "two" / "venv"
    make_venv(first, templates)
    make_venv(second, templates)  # from the same copy of uv's venv
    by_uv = tmp_path / "uv" / "venv"
    subprocess.run([uv_binary(), "venv", "--quiet", "--python", sys.executable, str(by_uv)], check=True)
    expected = _venv_files(by_uv)
    seed = next(name for name in _venv_files(first) if name.endswith(SEED_PTH))
    for venv in (first, second):
        files = _venv_files(venv)
        assert files.pop(seed)[0] == "file"
        assert files == expected
        prefix = subprocess.run([venv / "bin" / "python", "-c", "import sys, sqlalchemy; print(sys.prefix)"],
                                capture_output=True, text=True, check=True)  # fmt: skip
        assert prefix.stdout.strip() == str(venv)
    kept = sorted(path.name for path in templates.iterdir())
    assert kept == [kept[0], f"{kept[0]}.lock"]  # one venv made by uv and its lock, nothing left of its making
    moved = templates.rename(tmp_path / "moved")  # the cache root renamed between runs
    third = tmp_path / "three" / "venv"
    make_venv(third, moved)
    assert str(templates).encode() not in b"".join(
        path.read_bytes() for path in third.rglob("*") if path.is_file() and not path.is_symlink()
    )
    assert _venv_files(third) == _venv_files(first) | {seed: _venv_files(third)[seed]}


def test_a_venv_template_that_cannot_be_kept_leaves_the_image_s_venv_made(tmp_path: Path):
    templates = tmp_path / "templates"
    templates.write_text("a file where the templates' folder would be")  # the template's copy fails (OSError)
    venv = tmp_path / "one" / "venv"
    make_venv(venv, templates)
    done = subprocess.run([venv / "bin" / "python", "-c", "import sys; print(sys.prefix)"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == str(venv)
