"""Mirrors (cloned once, fetched before each job, only allowed repositories) and requests -> specs (recipes from
the server's config or the repository's bisect.toml at the bad commit; free-form commands only when allowed)."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from git_holds import waits_on, worktree_add_held_at_its_null_head
from synthetic import culprit_history

from bisector.service.config import ServiceConfig
from bisector.service.mirrors import Mirrors
from bisector.service.submission import CommandNotAllowedError, build_submission, check_request
from bisector.vocab.errors import InputError, RepoError
from bisector.vocab.gitcommand import WORKTREE_ADD_LOCK
from bisector.vocab.gitrepo import GitRepo

WAIT_S = 120.0  # only ends a hung test; no speed target

REPO_TOML = """
[bisect]
run = "bash test.sh --default"
metric = "metric: ([0-9.]+)"
expect = ">= 8"

[recipes.quick]
run = "bash test.sh --quick"
"""


def commit_file(repo: Path, name: str, text: str, message: str) -> str:
    (repo / name).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", name], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", message], check=True
    )
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


@pytest.fixture
def source(tmp_path: Path) -> Path:
    repo = culprit_history(tmp_path / "source", 8, 5).path
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-f", "main"], check=True)
    return repo


def config(tmp_path: Path, source: Path, **extra: Any) -> ServiceConfig:
    return ServiceConfig(allowed_repos=(str(source),), mirror_dir=tmp_path / "mirrors", **extra)


def test_a_mirror_is_cloned_once_and_fetched_before_each_job(tmp_path: Path, source: Path) -> None:
    mirrors = Mirrors(tmp_path / "mirrors", (str(source),))
    path = mirrors.sync(str(source))
    head = GitRepo(source).resolve("main")
    assert GitRepo(path).resolve("main") == head
    newer = commit_file(source, "extra.txt", "x\n", "one more")
    assert mirrors.sync(str(source)) == path
    assert GitRepo(path).resolve("main") == newer
    assert GitRepo(path).is_ancestor(head, newer)


def test_only_allowed_repositories_are_mirrored(tmp_path: Path, source: Path) -> None:
    mirrors = Mirrors(tmp_path / "mirrors", (str(source),))
    with pytest.raises(InputError, match="not served here"):
        mirrors.sync(str(tmp_path))
    assert not (tmp_path / "mirrors").exists()


def test_a_failed_clone_leaves_no_half_made_mirror_and_the_next_sync_clones_cleanly(
    tmp_path: Path, source: Path
) -> None:
    later = tmp_path / "later"  # allowed, but not there yet
    mirrors = Mirrors(tmp_path / "mirrors", (str(later),))
    with pytest.raises(RepoError, match="git fetch"):
        mirrors.sync(str(later))
    assert list((tmp_path / "mirrors").iterdir()) == []
    killed = tmp_path / "mirrors" / f".{mirrors.path(str(later)).name}.partial-left-by-a-killed-server"
    killed.mkdir()
    subprocess.run(["git", "clone", "-q", str(source), str(later)], check=True)
    path = mirrors.sync(str(later))
    assert list((tmp_path / "mirrors").iterdir()) == [path]
    assert GitRepo(path).resolve("main") == GitRepo(source).resolve("main")


def test_a_fetch_into_the_mirror_waits_for_a_worktree_being_added_to_it(tmp_path: Path, source: Path) -> None:
    """Submissions fetch while the workers of earlier bisects add their worktrees of the mirror; a fetch that reads
    the null HEAD of a worktree being added fails ("bad object worktrees/.../HEAD")."""
    mirrors = Mirrors(tmp_path / "mirrors", (str(source),))
    mirror = mirrors.sync(str(source))
    newer = commit_file(source, "extra.txt", "x\n", "one more")
    with ThreadPoolExecutor(1) as threads:
        with worktree_add_held_at_its_null_head(mirror, tmp_path / "slots" / "slot-0", tmp_path):
            synced = threads.submit(mirrors.sync, str(source))
            deadline = time.monotonic() + WAIT_S
            while not synced.done() and not waits_on(mirror / ".git" / WORKTREE_ADD_LOCK):
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert synced.result() == mirror
    assert GitRepo(mirror).resolve("main") == newer


def request(source: Path, **extra: object) -> dict[str, Any]:
    return check_request({"repo": str(source), "good": "main~7", "bad": "main", **extra})


def spec_for(tmp_path: Path, source: Path, settings: ServiceConfig, body: dict[str, Any]) -> Any:
    mirror = Mirrors(settings.mirror_dir, settings.allowed_repos).sync(str(source))
    return build_submission(settings, mirror, str(source), body).spec


def test_the_repositorys_recipe_is_read_at_the_bad_commit(tmp_path: Path, source: Path) -> None:
    commit_file(source, "bisect.toml", REPO_TOML, "recipes")
    settings = config(tmp_path, source)
    assert spec_for(tmp_path, source, settings, request(source, recipe="quick")).test.run == "bash test.sh --quick"
    default = spec_for(tmp_path, source, settings, request(source))
    assert (default.test.run, default.test.metric, default.test.expect) == (
        "bash test.sh --default",
        "metric: ([0-9.]+)",
        ">= 8",
    )
    with pytest.raises(InputError, match="no command"):  # main~1 has no bisect.toml
        spec_for(tmp_path, source, settings, request(source, bad="main~1", good="main~6"))


def test_the_servers_recipe_wins_and_tuning_keys_apply(tmp_path: Path, source: Path) -> None:
    commit_file(source, "bisect.toml", REPO_TOML, "recipes")
    settings = config(tmp_path, source, recipes={"quick": {"run": "server-run", "timeout": 30}})
    spec = spec_for(tmp_path, source, settings, request(source, recipe="quick", repeat=3))
    assert (spec.test.run, spec.test.timeout_s, spec.search.repeat) == ("server-run", 30.0, 3)
    assert (spec.executor.kind, spec.executor.workers) == ("local", 1)


def test_free_form_commands_need_allow_commands(tmp_path: Path, source: Path) -> None:
    for body in (
        request(source, run="echo hi"),
        request(source, recipe="x", build="make"),
        request(source, env={"A": "1"}),
    ):
        with pytest.raises(CommandNotAllowedError, match="--allow-commands"):
            spec_for(tmp_path, source, config(tmp_path, source), body)
    allowed = config(tmp_path, source, allow_commands=True)
    assert spec_for(tmp_path, source, allowed, request(source, run="echo hi")).test.run == "echo hi"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ([], "JSON object"),
        ({"good": "a", "bad": "b"}, "'repo' is required"),
        ({"repo": "r", "good": "a", "bad": "b", "priority": -1}, "priority"),
        ({"repo": "r", "good": "a", "bad": "b", "priority": True}, "priority"),
        ({"repo": "r", "good": "a", "bad": "b", "executor": "ray"}, "unknown key"),
    ],
)
def test_bad_requests_are_refused_in_one_line(body: object, words: str) -> None:
    with pytest.raises(InputError, match=words):
        check_request(body)


def test_a_request_cherry_picks_the_mirrors_revisions_and_brings_patch_texts_only_where_commands_are_allowed(
    tmp_path: Path, source: Path
) -> None:
    """A request's `patch` is code it brings (texts: no file of the server's is read), so it needs --allow-commands;
    its `cherry_pick` names revisions of the mirror, stored as SHAs."""
    subprocess.run(["git", "-C", str(source), "checkout", "-q", "-b", "side", "main~7"], check=True)
    picked = commit_file(source, "extra.txt", "x\n", "side work")
    subprocess.run(["git", "-C", str(source), "checkout", "-q", "main"], check=True)
    text = "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n"
    with pytest.raises(CommandNotAllowedError, match=r"^patch: free-form commands are refused"):
        spec_for(tmp_path, source, config(tmp_path, source), request(source, recipe="x", patch=[text]))
    allowed = config(tmp_path, source, allow_commands=True)
    spec = spec_for(tmp_path, source, allowed, request(source, run="bash test.sh", cherry_pick=["side"], patch=[text]))
    assert [patch.to_json() for patch in spec.test.patches] == [
        {"kind": "cherry-pick", "source": "side", "content": picked},
        {"kind": "patch", "source": "#1 of the request", "content": text},
    ]
    with pytest.raises(InputError, match=r"^patch: expected a list of patch texts"):
        spec_for(tmp_path, source, allowed, request(source, run="bash test.sh", patch=str(tmp_path / "fix.diff")))
