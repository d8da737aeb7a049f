"""Submodules in the trees a bisect tests: each step's worktree and each image's tree hold every submodule,
recursively, at the commit the superproject records, as `git clone --recurse-submodules` gives them; the user's
checkout and config are never touched; a commit found nowhere is an infrastructure error, never a verdict.

Real repositories: upstream `inner` (nested in `lib`), `lib` and `app`, and the user's recursive clone of `app`;
the upstreams are moved away before a bisect, so every object comes from the user's clone.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from bisect_helpers import run_cli, stored_rows
from git_holds import WAIT_S, first_fetch_answer_held, waits_on, worktree_add_held_at_its_null_head
from images.image_repo import commit, init_repo

from bisector.report.model import has_submodules
from bisector.runner.worktrees import prune_worktrees
from bisector.vocab.errors import RepoError
from bisector.vocab.gitcommand import WORKTREE_ADD_LOCK
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.patches import Patch, PatchKind
from bisector.vocab.paths import cache_dir, worktree_root
from bisector.vocab.submodules import (
    UNUSED_S,
    USED_MARKER,
    LocalCopies,
    Submodule,
    absolute_url,
    cache_repositories,
    cached_repository,
    prune_cache,
)

# the metric is lib's value plus its nested submodule's: either one missing fails the test at every commit
TEST_SH = 'echo "metric: $(( $(cat lib/value) + $(cat lib/deps/inner/value) ))"\n'
METRIC = ["--run", "bash test.sh", "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8"]
ALLOW_FILE = ("-c", "protocol.file.allow=always")  # submodules from local paths (git refuses them by default)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *ALLOW_FILE, "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def init(path: Path) -> Path:
    init_repo(path)
    return path


def bump(repo: Path, path: str, sha: str, message: str) -> str:
    git(repo / path, "checkout", "-q", sha)
    return commit(repo, message, {})


@dataclass(frozen=True)
class Clone:
    path: Path  # the user's recursive clone of app
    shas: list[str]  # app's commits, oldest first
    culprit: str  # the commit that only bumps lib (and through it the nested inner)
    upstream: Path  # where app, lib and inner were made (moved away once cloned)


@pytest.fixture
def clone(tmp_path: Path) -> Clone:
    """app: 0 adds lib (value 5, inner's value 5: metric 10), 1-3 touch notes, 4 bumps lib to a commit that bumps
    inner to value 1 (metric 6: bad), 5 touches notes. lib's and inner's histories go on past what app records."""
    upstream = tmp_path / "upstream"
    inner = init(upstream / "inner")
    inner_good = commit(inner, "inner 5", {"value": "5\n"})
    inner_bad = commit(inner, "inner 1", {"value": "1\n"})
    commit(inner, "inner later", {"value": "0\n"})
    lib = init(upstream / "lib")
    commit(lib, "lib 5", {"value": "5\n"})
    git(lib, "submodule", "add", "-q", "../inner", "deps/inner")
    lib_good = bump(lib, "deps/inner", inner_good, "inner at 5")
    lib_bad = bump(lib, "deps/inner", inner_bad, "inner at 1")
    commit(lib, "lib later", {"value": "7\n"})
    app = init(upstream / "app")
    commit(app, "test", {"test.sh": TEST_SH})
    git(app, "submodule", "add", "-q", "../lib", "lib")
    shas = [bump(app, "lib", lib_good, "lib at 5")]
    shas += [commit(app, f"notes {n}", {"notes": f"{n}\n"}) for n in range(1, 4)]
    shas.append(bump(app, "lib", lib_bad, "lib bumped"))
    shas.append(commit(app, "notes 5", {"notes": "5\n"}))
    user = tmp_path / "user"
    subprocess.run(["git", *ALLOW_FILE, "clone", "-q", "--recurse-submodules", str(app), str(user)], check=True)
    upstream.rename(tmp_path / "upstream-gone")  # nothing can be fetched: the user's clone holds it all
    return Clone(user, shas, shas[4], upstream)


def snapshot(user: Path) -> dict[str, bytes]:
    """The user's working tree (every file, the submodules' included) and every config of their repositories."""
    files = {}
    for path in sorted(user.rglob("*")):
        relative = path.relative_to(user).as_posix()
        inside_git = relative.startswith(".git/") or "/.git/" in relative
        if path.is_file() and (not inside_git or path.name == "config"):
            files[relative] = path.read_bytes()
    return files


def start(clone: Clone, db: Path, *extra: str) -> dict[str, Any]:
    done = run_cli("start", "--repo", str(clone.path), "--good", clone.shas[0], "--bad", clone.shas[-1], *METRIC,
                   "--executor", "inprocess", "--no-explain", "--format", "json", *extra, db=db)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.mark.parametrize("image", ["none", "venv"])
def test_a_bisect_names_the_commit_that_only_bumps_a_submodule(tmp_path: Path, clone: Clone, image: str) -> None:
    """Worktrees and image trees alike hold lib and its nested inner at each commit's gitlinks; the user's checkout
    and configs stay byte for byte."""
    before = snapshot(clone.path)
    report = start(clone, tmp_path / "b.db", "--image", image, "--workers", "2")
    assert report["status"] == "found", report
    assert report["first_bad"]["sha"] == clone.culprit
    assert snapshot(clone.path) == before
    assert git(clone.path, "status", "--porcelain", "--ignore-submodules=none") == ""


def test_a_reused_worktree_follows_the_gitlinks_and_drops_what_a_step_left(tmp_path: Path, clone: Clone) -> None:
    repo = GitRepo(clone.path)
    slot = tmp_path / "slot"
    repo.ensure_worktree(slot, clone.shas[-1])
    assert (slot / "lib/value").read_text() == "5\n"
    assert (slot / "lib/deps/inner/value").read_text() == "1\n"
    (slot / "lib/deps/inner/left-by-a-step").write_text("x")
    (slot / "lib/value").write_text("changed by a step\n")
    repo.ensure_worktree(slot, clone.shas[0], clean=False)  # even a caller that says it cleaned
    assert (slot / "lib/deps/inner/value").read_text() == "5\n"
    assert (slot / "lib/value").read_text() == "5\n"
    assert not (slot / "lib/deps/inner/left-by-a-step").exists()
    assert git(slot, "status", "--porcelain", "--ignore-submodules=none") == ""
    assert git(slot / "lib", "rev-parse", "HEAD") == git(clone.path, "rev-parse", f"{clone.shas[0]}:lib")


def test_a_commit_without_submodules_leaves_none_in_the_worktree(tmp_path: Path, clone: Clone) -> None:
    """A step at a commit before lib was added finds no lib folder, though the slot's last commit had it."""
    before_lib = git(clone.path, "rev-parse", f"{clone.shas[0]}~1")
    repo = GitRepo(clone.path)
    slot = tmp_path / "slot"
    repo.ensure_worktree(slot, clone.shas[0])
    repo.clean_worktree(slot)
    repo.ensure_worktree(slot, before_lib, clean=False)
    assert sorted(p.name for p in slot.iterdir()) == [".git", "test.sh"]


def test_an_exported_tree_holds_the_submodules_files_without_git(tmp_path: Path, clone: Clone) -> None:
    GitRepo(clone.path).export_tree(clone.shas[0], tmp_path / "tree")
    assert (tmp_path / "tree/lib/deps/inner/value").read_text() == "5\n"
    assert not list((tmp_path / "tree").rglob(".git"))


def unknown_commit_at_lib(clone: Clone) -> str:
    """A commit of app whose lib gitlink names a commit that no repository has."""
    missing = "1234567" * 5 + "89abc"
    git(clone.path, "update-index", "--cacheinfo", f"160000,{missing},lib")
    tree = git(clone.path, "write-tree")
    git(clone.path, "reset", "-q")  # the user's index as it was
    return git(clone.path, "commit-tree", "-p", clone.shas[-1], "-m", "lib at a lost commit", tree)


def test_a_submodule_commit_found_nowhere_is_an_error_naming_it(tmp_path: Path, clone: Clone) -> None:
    lost = unknown_commit_at_lib(clone)
    with pytest.raises(RepoError, match=r"^submodule lib needs commit 123456712345, which no repository on this"):
        GitRepo(clone.path).ensure_worktree(tmp_path / "slot", lost)
    with pytest.raises(RepoError, match=r"^submodule lib needs commit 123456712345, which no repository on this"):
        GitRepo(clone.path).export_tree(lost, tmp_path / "tree")


@pytest.mark.parametrize("image", ["none", "venv"])
def test_a_step_at_a_lost_submodule_commit_is_an_infrastructure_error(tmp_path: Path, clone: Clone, image: str) -> None:
    lost = unknown_commit_at_lib(clone)
    db = tmp_path / "b.db"
    done = run_cli("run-at", lost, "--repo", str(clone.path), *METRIC, "--executor", "inprocess",
                   "--image", image, "--format", "json", db=db)  # fmt: skip
    assert json.loads(done.stdout)["verdict"] == "error", done.stdout
    steps = stored_rows(db, "select verdict, error_kind, detail from steps")
    assert steps
    assert {(verdict, kind) for verdict, kind, _ in steps} == {("error", "harness")}
    assert all("submodule lib needs commit 123456712345" in detail for _, _, detail in steps)


def test_a_repository_without_submodules_runs_no_git_process_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step in a reused worktree is a checkout and a clean; an export is an archive: the only look for submodules
    is for a .gitmodules file in the tree."""
    repo = init(tmp_path / "plain")
    shas = [commit(repo, f"c{n}", {"f": f"{n}\n"}) for n in range(2)]
    real_git = subprocess.run(["which", "git"], capture_output=True, text=True, check=True).stdout.strip()
    shims, calls = tmp_path / "shims", tmp_path / "calls"
    shims.mkdir()
    (shims / "git").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real_git} "$@"\n')
    (shims / "git").chmod(0o755)
    opened = GitRepo(repo)
    opened.ensure_worktree(tmp_path / "slot", shas[0])
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    opened.ensure_worktree(tmp_path / "slot", shas[1])
    opened.export_tree(shas[1], tmp_path / "tree")
    commands = [line.split()[2:] for line in calls.read_text().splitlines()]  # after -C DIR
    subcommands = [next(word for word in words if not word.startswith("-") and "=" not in word) for words in commands]
    assert subcommands == ["checkout", "clean", "archive"]


def test_a_users_submodule_recurse_setting_does_not_reach_the_worktrees(
    tmp_path: Path, clone: Clone, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = tmp_path / "gitconfig"
    settings.write_text("[submodule]\n\trecurse = true\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(settings))
    before = snapshot(clone.path)
    repo = GitRepo(clone.path)
    for sha in (clone.shas[0], clone.shas[-1], clone.shas[0]):
        repo.ensure_worktree(tmp_path / "slot", sha)
    assert (tmp_path / "slot/lib/deps/inner/value").read_text() == "5\n"
    assert snapshot(clone.path) == before
    assert not list((clone.path / ".git/worktrees").glob("*/modules"))


def test_pruning_a_slot_makes_the_submodule_cache_forget_its_submodules(clone: Clone) -> None:
    slot = worktree_root(clone.path) / "slot-0"
    GitRepo(clone.path).ensure_worktree(slot, clone.shas[-1])
    entries = cache_repositories()
    assert [git(entry, "worktree", "list").count("\n") for entry in entries] == [1, 1]  # lib's and inner's
    pruned = prune_worktrees(str(clone.path))
    assert ([info.path for info in pruned.removed], pruned.kept) == ([slot], [])
    assert [git(entry, "worktree", "list").count("\n") for entry in entries] == [0, 0]
    assert pruned.submodule_caches == {}  # just used


def age(entry: Path, seconds: float) -> None:
    """Make the cache repository's last use that long ago."""
    marker = entry / ".git" / USED_MARKER
    os.utime(marker, (marker.stat().st_atime, marker.stat().st_mtime - seconds))


def test_prune_removes_the_submodule_cache_repositories_unused_for_a_day(clone: Clone) -> None:
    """One used a day ago goes (and is made again when next wanted); one used since stays."""
    GitRepo(clone.path).ensure_worktree(worktree_root(clone.path) / "slot-0", clone.shas[-1])
    stale, fresh = cache_repositories()
    age(stale, UNUSED_S + 60)
    age(fresh, UNUSED_S - 600)
    done = run_cli("worktrees", "prune")
    assert done.returncode == 0, done.stderr
    assert "removed 1 submodule cache repositories" in done.stdout, done.stdout
    assert cache_repositories() == [fresh]
    GitRepo(clone.path).ensure_worktree(worktree_root(clone.path) / "slot-0", clone.shas[0])
    assert (worktree_root(clone.path) / "slot-0/lib/deps/inner/value").read_text() == "5\n"


def test_prune_keeps_a_submodule_cache_repository_in_use(clone: Clone) -> None:
    """Kept though unused for a day: one whose lock a process holds (making, borrowing or fetching), and one that a
    worktree of a slot in use is registered in."""
    slot = worktree_root(clone.path) / "slot-0"
    GitRepo(clone.path).ensure_worktree(slot, clone.shas[-1])
    entries = cache_repositories()
    for entry in entries:
        age(entry, 2 * UNUSED_S)
    locked, other = entries
    with (locked.parent / f"{locked.name}.lock").open("a") as held, slot.with_name("slot-0.lock").open("a") as busy:
        fcntl.flock(held, fcntl.LOCK_EX)
        fcntl.flock(busy, fcntl.LOCK_EX)
        pruned = prune_worktrees()
        assert ([info.path for info in pruned.kept], pruned.submodule_caches) == ([slot], {})
        fcntl.flock(busy, fcntl.LOCK_UN)
        pruned = prune_worktrees()
        assert list(pruned.submodule_caches) == [other]
    assert cache_repositories() == [locked]
    assert list(prune_worktrees().submodule_caches) == [locked]


def test_the_reproduce_line_checks_out_the_submodules_and_runs(tmp_path: Path, clone: Clone) -> None:
    """Its `git submodule update` fetches them from their URLs (the upstreams, back in place): the test at the first
    bad commit reads lib's and inner's files there."""
    report = start(clone, tmp_path / "b.db")
    clone.upstream.with_name("upstream-gone").rename(clone.upstream)
    workdir = Path(f"/tmp/bisect-repro-{clone.culprit[:12]}")
    file_urls = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow", "GIT_CONFIG_VALUE_0": "always"}
    try:
        ran = subprocess.run(["bash", "-c", report["reproduce"]], capture_output=True, text=True,
                             env={**os.environ, **file_urls}, check=False)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines()[-1] == "metric: 6", ran.stdout
        assert (workdir / "lib/deps/inner/value").read_text() == "1\n"
    finally:
        subprocess.run(["git", "-C", str(clone.path), "worktree", "remove", "--force", str(workdir)], check=False)
        shutil.rmtree(workdir, ignore_errors=True)


def test_the_reproduce_line_updates_submodules_only_where_the_commit_is_known_to_have_some(
    tmp_path: Path, clone: Clone
) -> None:
    """A commit without .gitmodules, or a report shown where the repository is not, gets the line without it."""
    before_lib = git(clone.path, "rev-parse", f"{clone.shas[0]}~1")
    assert [has_submodules(str(clone.path), sha) for sha in (clone.culprit, before_lib)] == [True, False]
    db = tmp_path / "b.db"
    start(clone, db)
    clone.path.rename(tmp_path / "moved")
    shown = run_cli("show", "1", "--format", "json", db=db)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["reproduce"].split(" && ")[1:] == [
        f"cd /tmp/bisect-repro-{clone.culprit[:12]}",
        "bash -c 'bash test.sh'",
    ]


def test_a_submodule_worktree_whose_add_was_killed_is_added_again(tmp_path: Path, clone: Clone) -> None:
    """A `git worktree add` killed midway leaves its registration locked ("initializing"); once the slot's folder
    is gone (pruned, or removed by a step), the next step adds the submodule's worktree at that path again."""
    repo = GitRepo(clone.path)
    slot = tmp_path / "slot"
    repo.ensure_worktree(slot, clone.shas[0])
    for entry in cache_repositories():
        added = git(entry, "worktree", "list", "--porcelain").split("\n\n")[-1].splitlines()[0].split(" ", 1)[1]
        git(entry, "worktree", "lock", "--reason", "initializing", added)
    shutil.rmtree(slot)
    repo.ensure_worktree(slot, clone.shas[-1])
    assert (slot / "lib/deps/inner/value").read_text() == "1\n"


@pytest.mark.parametrize(
    "base", ["git@host:org/app.git", "git@host:app.git", "host:app", "https://host/org/app.git/", "/srv/app"]
)
def test_a_relative_url_is_made_absolute_as_git_makes_it(tmp_path: Path, base: str) -> None:
    """scp-like `host:path` remotes too: `../` past the path's first folder goes to the host's `:`."""
    urls = ["../lib", "../../lib.git", "./sub/x", "../lib/../other"]
    repo = init(tmp_path / "app")
    sha = commit(repo, "a file", {"f": "x\n"})
    modules = "".join(f'[submodule "m{n}"]\n\tpath = m{n}\n\turl = {url}\n' for n, url in enumerate(urls))
    (repo / ".gitmodules").write_text(modules)
    for n in range(len(urls)):
        git(repo, "update-index", "--add", "--cacheinfo", f"160000,{sha},m{n}")
    git(repo, "config", "remote.origin.url", base)
    git(repo, "submodule", "init")
    assert [absolute_url(base, url) for url in urls] == [git(repo, "config", f"submodule.m{n}.url") for n in range(4)]


class Killed(BaseException):
    """A process killed at a chosen moment: raised by an audit hook before the operation, so nothing after it runs."""


_KILL_AT: dict[str, Any] = {}  # the events to count and how many more may happen before the kill


def _kill_hook(event: str, args: tuple[Any, ...]) -> None:
    if event in _KILL_AT.get("events", ()):
        _KILL_AT["left"] -= 1
        if _KILL_AT["left"] == 0:
            _KILL_AT.clear()
            raise Killed(event, args)


sys.addaudithook(_kill_hook)  # audit hooks stay for the process's life: this one acts only while armed


def killed_at(n: int, events: set[str], call: Callable[[], object]) -> bool:
    """Run call, killed just before the n-th of events (os.remove, subprocess.Popen, ...); whether it was."""
    _KILL_AT.update(events=events, left=n)
    try:
        call()
    except Killed:
        return True
    finally:
        _KILL_AT.clear()
    return False


def test_a_prune_killed_at_any_moment_leaves_the_submodule_cache_usable(tmp_path: Path, clone: Clone) -> None:
    """Killed before each of its removals in turn, prune leaves every cache repository whole or gone: the next
    tree is made with its submodules (nothing fetched), and a later prune removes what the killed one left."""
    repo = GitRepo(clone.path)
    for n in itertools.count(1):
        repo.export_tree(clone.shas[-1], tmp_path / f"tree-{n}")
        assert (tmp_path / f"tree-{n}/lib/deps/inner/value").read_text() == "1\n"
        for entry in cache_repositories():
            age(entry, 2 * UNUSED_S)
        if not killed_at(n, {"os.remove", "os.unlink", "os.rmdir", "os.rename"}, prune_cache):
            break
    prune_cache(unused_s=0)
    assert [path for path in (cache_dir() / "submodules").iterdir() if path.is_dir()] == []


def test_a_cache_repository_whose_maker_was_killed_at_any_moment_is_whole_for_the_next(
    tmp_path: Path, clone: Clone
) -> None:
    """Killed before each git process (and rename) of making the cache repositories in turn: the next tree is made
    with its submodules, and each cache repository has gc off."""
    repo = GitRepo(clone.path)
    for n in itertools.count(1):
        for entry in cache_repositories():
            shutil.rmtree(entry)
        whole = not killed_at(
            n, {"subprocess.Popen", "os.rename"}, partial(repo.export_tree, clone.shas[0], tmp_path / f"killed-{n}")
        )
        repo.export_tree(clone.shas[0], tmp_path / f"tree-{n}")
        assert (tmp_path / f"tree-{n}/lib/deps/inner/value").read_text() == "5\n"
        assert [git(entry, "config", "gc.auto") for entry in cache_repositories()] == ["0", "0"]
        if whole:
            break


def test_a_fetch_into_a_cache_repository_waits_for_a_worktree_being_added_to_it(tmp_path: Path) -> None:
    """One worker adds its submodule worktree of a cache repository while another fetches a commit into it; a fetch
    that reads the null HEAD of the worktree being added fails ("bad object") after its objects came: the commit is
    there, but not the branches it fetched (the next fetch cannot tell the URL what it has)."""
    upstream = init(tmp_path / "lib")
    first = commit(upstream, "one", {"value": "1\n"})
    nowhere = LocalCopies((), (), str(tmp_path))
    entry = cached_repository(Submodule("lib", "lib", str(upstream), first), nowhere)
    later = commit(upstream, "two", {"value": "2\n"})  # only upstream has it: the next one fetches
    with ThreadPoolExecutor(1) as threads:
        with worktree_add_held_at_its_null_head(entry, tmp_path / "slot" / "lib", tmp_path, first):
            fetched = threads.submit(cached_repository, Submodule("lib", "lib", str(upstream), later), nowhere)
            deadline = time.monotonic() + WAIT_S
            while not fetched.done() and not waits_on(entry / ".git" / WORKTREE_ADD_LOCK):
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert fetched.result() == entry
    assert git(entry, "rev-parse", "refs/remotes/origin/main") == later


def test_a_cache_repository_serves_its_commits_and_adds_worktrees_while_a_fetch_waits_on_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit only the URL has is fetched while the URL is slow to answer: a commit the cache repository holds
    already is served, and a worktree of it added, meanwhile. Only the fetch's short local step, which takes what
    came into the repository, runs under its lock and its worktree-add lock."""
    upstream = init(tmp_path / "lib")
    first = commit(upstream, "one", {"value": "1\n"})
    nowhere = LocalCopies((), (), str(tmp_path))
    entry = cached_repository(Submodule("lib", "lib", str(upstream), first), nowhere)
    later = commit(upstream, "two", {"value": "2\n"})
    entry_lock = entry.with_name(f"{entry.name}.lock")
    with ThreadPoolExecutor(2) as threads:
        with first_fetch_answer_held(tmp_path, monkeypatch) as until_held:
            fetched = threads.submit(cached_repository, Submodule("lib", "lib", str(upstream), later), nowhere)
            until_held(fetched)
            deadline = time.monotonic() + WAIT_S
            served = threads.submit(cached_repository, Submodule("lib", "lib", str(upstream), first), nowhere)
            while not served.done() and not waits_on(entry_lock):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert served.done(), "a commit the cache holds waits for another commit's fetch"
            assert served.result() == entry
            added = threads.submit(GitRepo(entry).ensure_worktree, tmp_path / "slot" / "lib", first)
            while not added.done() and not waits_on(entry / ".git" / WORKTREE_ADD_LOCK):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert added.done(), "the worktree add waits for the fetch"
            added.result()
        assert fetched.result() == entry
    assert git(entry, "rev-parse", "refs/remotes/origin/main") == later


def test_a_commit_no_local_repository_holds_is_fetched_from_the_url_into_the_cache(tmp_path: Path) -> None:
    upstream = init(tmp_path / "lib")
    first = commit(upstream, "one", {"value": "1\n"})
    nowhere = LocalCopies((), (), str(tmp_path))
    entry = cached_repository(Submodule("lib", "lib", str(upstream), first), nowhere)
    assert git(entry, "rev-parse", f"{first}^{{commit}}") == first


def test_a_submodule_url_that_git_would_read_as_an_option_is_refused(tmp_path: Path) -> None:
    """`--upload-pack=...` as a URL would run a command on the fetch; git refuses such URLs as well."""
    lib = init(tmp_path / "lib")
    commit(lib, "one", {"value": "1\n"})
    app = init(tmp_path / "app")
    commit(app, "test", {"test.sh": TEST_SH})
    git(app, "submodule", "add", "-q", str(lib), "lib")
    marker = tmp_path / "ran"
    git(app, "config", "--file", ".gitmodules", "submodule.lib.url", f"--upload-pack=touch {marker};")
    sha = commit(app, "a URL read as an option", {})
    with pytest.raises(RepoError, match="would be read as an option"):
        GitRepo(app).ensure_worktree(tmp_path / "slot", sha)
    assert not marker.exists()


def test_a_fetch_into_the_cache_after_one_killed_mid_way_records_the_branches(tmp_path: Path) -> None:
    """A killed fetch leaves `refs/.../*.lock`: the next fetch (under the entry's lock) is not stopped by them."""
    upstream = init(tmp_path / "lib")
    first = commit(upstream, "one", {"value": "1\n"})
    nowhere = LocalCopies((), (), str(tmp_path))
    entry = cached_repository(Submodule("lib", "lib", str(upstream), first), nowhere)
    (entry / ".git" / "refs" / "remotes" / "origin" / "main.lock").write_text(first)
    (entry / ".git" / "packed-refs.lock").write_text("")
    later = commit(upstream, "two", {"value": "2\n"})
    assert cached_repository(Submodule("lib", "lib", str(upstream), later), nowhere) == entry
    assert git(entry, "rev-parse", "refs/remotes/origin/main") == later


@pytest.mark.parametrize("wanted", ["fetched before", "fetched after"])
def test_a_cache_repository_whose_borrowed_objects_went_away_checks_out_again(tmp_path: Path, wanted: str) -> None:
    """The cache borrowed a user's copy of lib, then fetched a commit only the URL had (its pack leaves out the
    trees and blobs the copy held); the user deletes the copy. A commit fetched before, and one fetched after (the
    entry's branches tell the URL it has their history), are checked out whole."""
    upstream = init(tmp_path / "lib")
    borrowed = commit(upstream, "one", {"a/value": "1\n", "b/value": "1\n"})
    subprocess.run(["git", "clone", "-q", str(upstream), str(tmp_path / "copy")], check=True)
    copies = LocalCopies((), (tmp_path,), str(tmp_path))  # the submodule's path "copy" holds the user's copy
    entry = cached_repository(Submodule("lib", "copy", str(upstream), borrowed), copies)
    fetched = commit(upstream, "two", {"a/value": "2\n"})
    assert cached_repository(Submodule("lib", "copy", str(upstream), fetched), copies) == entry
    shutil.rmtree(tmp_path / "copy")
    if wanted == "fetched after":
        fetched = commit(upstream, "three", {"a/value": "3\n"})
    assert cached_repository(Submodule("lib", "copy", str(upstream), fetched), copies) == entry
    GitRepo(entry).export_tree(fetched, tmp_path / "tree")
    assert (tmp_path / "tree/b/value").read_text() == "1\n"


def test_prune_forgets_the_registrations_killed_worktree_adds_left_locked(clone: Clone) -> None:
    """A slot and its submodules' worktrees whose registrations a killed `git worktree add` left locked
    ("initializing"): prune removes the slot and forgets them all, and later removes the cache repositories."""
    slot = worktree_root(clone.path) / "slot-0"
    GitRepo(clone.path).ensure_worktree(slot, clone.shas[-1])
    entries = cache_repositories()
    for repo in (clone.path, *entries):  # each one's worktree: the slot, lib's, inner's
        added = git(repo, "worktree", "list", "--porcelain").split("\n\n")[-1].splitlines()[0].split(" ", 1)[1]
        git(repo, "worktree", "lock", "--reason", "initializing", added)
    assert [info.path for info in prune_worktrees(str(clone.path)).removed] == [slot]
    assert [git(repo, "worktree", "list").count("\n") for repo in (clone.path, *entries)] == [0, 0, 0]
    for entry in entries:
        age(entry, 2 * UNUSED_S)
    assert sorted(prune_worktrees().submodule_caches) == entries


def test_a_submodule_marked_update_none_is_left_empty_as_a_recursive_clone_leaves_it(
    tmp_path: Path, clone: Clone
) -> None:
    git(clone.path, "config", "--file", ".gitmodules", "submodule.lib.update", "none")
    sha = commit(clone.path, "lib not checked out", {})
    clone.upstream.with_name("upstream-gone").rename(clone.upstream)
    git(tmp_path, "clone", "-q", "--recurse-submodules", str(clone.path), "recursive-clone")
    assert list((tmp_path / "recursive-clone/lib").iterdir()) == []
    GitRepo(clone.path).ensure_worktree(tmp_path / "slot", sha)
    GitRepo(clone.path).export_tree(sha, tmp_path / "tree")
    assert [list((tmp_path / tree / "lib").iterdir()) for tree in ("slot", "tree")] == [[], []]


def test_a_step_that_deletes_gitmodules_does_not_keep_its_files_in_the_submodules(tmp_path: Path, clone: Clone) -> None:
    """The clean after the step, and the next step's checkout in a cleaned worktree, drop what it left in lib and
    its nested inner though it deleted both .gitmodules."""
    repo = GitRepo(clone.path)
    slot = tmp_path / "slot"
    repo.ensure_worktree(slot, clone.shas[-1])
    for clean in (repo.clean_worktree, partial(repo.ensure_worktree, sha=clone.shas[0], clean=False)):
        (slot / ".gitmodules").unlink(missing_ok=True)  # the clean does not restore it
        (slot / "lib/.gitmodules").unlink(missing_ok=True)
        (slot / "lib/left-by-a-step").write_text("x")
        (slot / "lib/deps/inner/left-by-a-step").write_text("x")
        clean(slot)
        assert sorted(slot.rglob("left-by-a-step")) == []


def lib_replaced_by_a_folder(clone: Clone) -> str:
    """A commit of app whose lib is a folder of its own files (`lib/own`), no longer a submodule."""
    git(clone.path, "config", "--file", ".gitmodules", "--remove-section", "submodule.lib")
    git(clone.path, "add", ".gitmodules")
    blob = subprocess.run(["git", "-C", str(clone.path), "hash-object", "-w", "--stdin"], input="own\n",
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    git(clone.path, "update-index", "--force-remove", "lib")
    git(clone.path, "update-index", "--add", "--cacheinfo", f"100644,{blob},lib/own")
    tree = git(clone.path, "write-tree")
    git(clone.path, "reset", "-q", "--hard")  # the user's index and .gitmodules as they were
    return git(clone.path, "commit-tree", "-p", clone.shas[-1], "-m", "lib a folder", tree)


@pytest.mark.parametrize("change", ["update = none", "dropped from .gitmodules", "replaced by a folder"])
def test_a_reused_worktree_empties_a_submodule_the_next_commit_does_not_check_out(
    tmp_path: Path, clone: Clone, change: str
) -> None:
    """The slot's last commit had lib checked out; the next one keeps lib's gitlink but marks it `update = none` or
    drops it from .gitmodules (its folder is empty there, as a recursive clone of that commit leaves it), or makes
    lib a folder of its own files (only those are there)."""
    if change == "replaced by a folder":
        sha, left = lib_replaced_by_a_folder(clone), ["own"]
    else:
        if change == "update = none":
            git(clone.path, "config", "--file", ".gitmodules", "submodule.lib.update", "none")
        else:
            git(clone.path, "config", "--file", ".gitmodules", "--remove-section", "submodule.lib")
        sha, left = commit(clone.path, f"lib {change}", {}), []
    repo = GitRepo(clone.path)
    slot = tmp_path / "slot"
    repo.ensure_worktree(slot, clone.shas[-1])
    assert (slot / "lib/deps/inner/value").read_text() == "1\n"
    repo.ensure_worktree(slot, sha, clean=False)
    assert sorted(p.name for p in (slot / "lib").iterdir()) == left
    assert git(slot, "status", "--porcelain", "--ignore-submodules=none") == ""
    repo.ensure_worktree(slot, clone.shas[-1])  # checked out again where a later commit has it
    assert (slot / "lib/deps/inner/value").read_text() == "1\n"


@pytest.mark.parametrize("kind", ["--cherry-pick", "--patch"])
def test_a_patch_that_moves_a_gitlink_brings_the_submodule_to_the_patched_commit(
    tmp_path: Path, clone: Clone, kind: str
) -> None:
    """A step in a worktree at the good commit with the culprit's change (lib bumped, and with it inner) applied, as
    `git cherry-pick -n` or `git apply --index` of its diff: the test sees the patched submodules (metric 6), as an
    image's exported tree does."""
    patch = tmp_path / "bump.patch"
    patch.write_text(git(clone.path, "diff", "--submodule=short", f"{clone.culprit}~1", clone.culprit) + "\n")
    source = clone.culprit if kind == "--cherry-pick" else str(patch)
    done = run_cli("run-at", clone.shas[0], "--repo", str(clone.path), *METRIC, "--executor", "inprocess",
                   kind, source, "--image", "none", "--format", "json", db=tmp_path / "b.db")  # fmt: skip
    assert json.loads(done.stdout)["verdict"] == "bad", done.stdout + done.stderr
    assert stored_rows(tmp_path / "b.db", "select verdict, samples from steps") == [("bad", "[6.0]")]


def test_urls_of_one_repository_share_one_cache_repository(tmp_path: Path) -> None:
    """Spellings of one URL (a trailing `.git` or `/`, https, ssh or scp-like, a user, a port, the host's case) find
    one cache repository (the commit borrowed from a local copy: nothing fetched); a local path spelled with a
    trailing `/` shares its repository too, fetched from the URL as given; other repositories get their own."""
    upstream = init(tmp_path / "lib")
    first = commit(upstream, "one", {"value": "1\n"})
    copies = LocalCopies((), (tmp_path,), str(tmp_path))  # the submodule's path "lib" holds a copy
    spellings = ["https://Git.Example/org/lib.git", "https://git.example/org/lib/", "git@git.example:org/lib",
                 "ssh://git@git.example:22/org/lib.git", "git://git.example/org/lib.git/"]  # fmt: skip
    entries = {cached_repository(Submodule("lib", "lib", url, first), copies) for url in spellings}
    assert len(entries) == 1
    nowhere = LocalCopies((), (), str(tmp_path))
    later = commit(upstream, "two", {"value": "2\n"})
    local = {cached_repository(Submodule("lib", "lib", url, sha), nowhere) for url, sha in
             [(str(upstream), first), (f"{upstream}/", later), (f"{upstream}.git", later)]}  # fmt: skip
    assert len(local) == 1
    other = cached_repository(Submodule("lib", "lib", "https://git.example/org/other", first), copies)
    assert cache_repositories() == sorted([*entries, *local, other])


def test_the_reproduce_line_checks_out_the_submodules_a_patch_moves(tmp_path: Path, clone: Clone) -> None:
    """A patch that moves lib's gitlink (to "lib later": value 7, metric 8) makes both endpoints good; the reproduce
    line applies it before `git submodule update`, so by hand the test reads the patched lib, as the steps did."""
    lib_bad = git(clone.path, "rev-parse", f"{clone.culprit}:lib")
    lib_later = git(clone.path / "lib", "rev-parse", "origin/HEAD")
    patch = tmp_path / "lib-later.diff"
    patch.write_text(
        f"diff --git a/lib b/lib\nindex {lib_bad[:12]}..{lib_later[:12]} 160000\n--- a/lib\n+++ b/lib\n"
        f"@@ -1 +1 @@\n-Subproject commit {lib_bad}\n+Subproject commit {lib_later}\n"
    )
    db = tmp_path / "b.db"
    started = run_cli("start", "--repo", str(clone.path), "--good", clone.culprit, "--bad", clone.shas[-1], *METRIC,
                      "--patch", str(patch), "--executor", "inprocess", "--no-explain", db=db)  # fmt: skip
    assert "tested good" in started.stdout, started.stdout + started.stderr
    shown = run_cli("show", "1", "--format", "json", db=db)
    assert shown.returncode == 0, shown.stderr
    clone.upstream.with_name("upstream-gone").rename(clone.upstream)
    workdir = Path(f"/tmp/bisect-repro-{clone.shas[-1][:12]}")
    file_urls = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow", "GIT_CONFIG_VALUE_0": "always"}
    try:
        ran = subprocess.run(["bash", "-c", json.loads(shown.stdout)["reproduce"]], capture_output=True, text=True,
                             env={**os.environ, **file_urls}, check=False)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines()[-1] == "metric: 8", ran.stdout
    finally:
        subprocess.run(["git", "-C", str(clone.path), "worktree", "remove", "--force", str(workdir)], check=False)
        shutil.rmtree(workdir, ignore_errors=True)


def test_a_patch_that_adds_the_submodules_gets_them_checked_out(clone: Clone) -> None:
    """The commit before lib was added has no .gitmodules; cherry-picking the commit that adds lib gives it one."""
    before_lib = git(clone.path, "rev-parse", f"{clone.shas[0]}~1")
    adds_lib = Patch(PatchKind.COMMIT, "adds lib", clone.shas[0])
    assert [has_submodules(str(clone.path), before_lib, patches) for patches in ((), (adds_lib,))] == [False, True]


def _object_count(repo: Path) -> int:
    counts = dict(line.split(": ") for line in git(repo, "count-objects", "-v").splitlines())
    return int(counts["count"]) + int(counts["in-pack"])


def test_whether_a_patched_commit_has_submodules_is_told_without_writing_into_the_repository(clone: Clone) -> None:
    """Every view of a patched bisect's report asks it (the reproduce line): where no patch changes .gitmodules, the
    commit's own tree answers, and no patched tree is made in the user's repository."""
    before_lib = git(clone.path, "rev-parse", f"{clone.shas[0]}~1")
    notes_5 = Patch(PatchKind.COMMIT, "notes 5", clone.shas[-1])
    notes_4 = Patch(
        PatchKind.DIFF, "notes.diff", "diff --git a/notes b/notes\n--- a/notes\n+++ b/notes\n@@ -1 +1 @@\n-5\n+4\n"
    )
    objects = _object_count(clone.path)
    answers = [has_submodules(str(clone.path), sha, (notes_5, notes_4)) for sha in (clone.culprit, before_lib)]
    assert answers == [True, False]
    assert _object_count(clone.path) == objects
    adds_gitmodules = Patch(
        PatchKind.DIFF, "gitmodules.diff",
        "diff --git a/.gitmodules b/.gitmodules\nnew file mode 100644\n--- /dev/null\n+++ b/.gitmodules\n"
        '@@ -0,0 +1 @@\n+[submodule "x"]\n',
    )  # fmt: skip
    assert has_submodules(str(clone.path), before_lib, (adds_gitmodules,))
