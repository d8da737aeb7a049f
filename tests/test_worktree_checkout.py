"""GitRepo.ensure_worktree / clean_worktree: libgit2 in-process where it can, git itself where it must.

Real repositories and worktrees; the result is checked with the git CLI, which is what a step's build sees.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bisector.errors import RepoError
from bisector.gitrepo import GitRepo
from bisector.libgit import cli_reason


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """Three commits: src/a.txt edited, src/b.txt added then removed, build/ and *.log ignored."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.name", "t")
    git(path, "config", "user.email", "t@example.com")
    shas = []
    for i, files in enumerate([{"src/a.txt": "one\n"}, {"src/a.txt": "two\n", "src/b.txt": "b\n"}, {}]):
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        if i == 0:
            (path / ".gitignore").write_text("build/\n*.log\n")
            (path / "run.sh").write_text("#!/bin/sh\necho hi\n")
            (path / "run.sh").chmod(0o755)
        if i == 2:
            (path / "src/b.txt").unlink()
        git(path, "add", "-A")
        git(path, "commit", "-qm", f"commit {i}")
        shas.append(git(path, "rev-parse", "HEAD"))
    return path, shas


def test_checkout_matches_the_commit_and_removes_what_a_step_left(repo: tuple[Path, list[str]], tmp_path: Path):
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[0])  # made by `git worktree add`
    gitrepo.ensure_worktree(worktree, shas[1], clean=False)  # a worktree the last step's tidy left clean
    assert gitrepo._worktree(worktree) is not None  # this repository needs nothing only git does
    assert git(worktree, "rev-parse", "HEAD") == shas[1]
    assert (worktree / "src/b.txt").read_text() == "b\n"
    # What a step leaves behind: an edited tracked file, untracked files, empty and nested directories,
    # ignored build output.
    (worktree / "src/a.txt").write_text("edited\n")
    (worktree / "out.txt").write_text("x")
    (worktree / "results/deep").mkdir(parents=True)
    (worktree / "results/deep/r.json").write_text("{}")
    (worktree / "empty").mkdir()
    (worktree / "build/obj").mkdir(parents=True)
    (worktree / "build/obj/k.o").write_text("o")
    (worktree / "step.log").write_text("log")
    gitrepo.ensure_worktree(worktree, shas[2])
    assert git(worktree, "rev-parse", "HEAD") == shas[2]
    assert git(worktree, "status", "--porcelain", "--untracked-files=all") == ""
    assert (worktree / "src/a.txt").read_text() == "two\n"
    assert not (worktree / "src/b.txt").exists()  # removed by the commit
    for gone in ("out.txt", "results", "empty"):
        assert not (worktree / gone).exists(), gone
    assert (worktree / "build/obj/k.o").exists()  # ignored: kept
    assert (worktree / "step.log").exists()
    assert (worktree / "run.sh").stat().st_mode & 0o111  # the executable bit survives
    assert git(worktree, "diff", "--stat") == ""  # the index agrees with the files


def test_checkout_is_detached_and_leaves_branches_alone(repo: tuple[Path, list[str]], tmp_path: Path):
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[2])
    branches_before = git(path, "branch", "--list")
    gitrepo.ensure_worktree(worktree, shas[0])
    done = subprocess.run(["git", "symbolic-ref", "-q", "HEAD"], cwd=worktree, capture_output=True, check=False)
    assert done.returncode == 1  # detached
    assert git(path, "branch", "--list") == branches_before
    assert git(path, "rev-parse", "HEAD") == shas[2]  # the main checkout did not move
    gitrepo.ensure_worktree(worktree, "HEAD")  # what a worker does with its cached worktree at start
    assert git(worktree, "rev-parse", "HEAD") == shas[0]
    assert gitrepo._worktree(worktree) is not None
    with pytest.raises(RepoError, match="checkout of 000000000000"):
        gitrepo.ensure_worktree(worktree, "0" * 40)  # git reports a commit that is not there


def test_clean_without_a_checkout_and_the_nested_repository_git_removes(repo: tuple[Path, list[str]], tmp_path: Path):
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[1])
    (worktree / "left.txt").write_text("x")
    nested = worktree / "vendor/dep"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")  # libgit2 does not remove a nested repository; `git clean -ffd` does
    (nested / "f").write_text("f")
    gitrepo.clean_worktree(worktree)
    assert not (worktree / "left.txt").exists()
    assert not (worktree / "vendor").exists()
    assert git(worktree, "status", "--porcelain", "--untracked-files=all", "--ignored") == ""
    assert git(worktree, "rev-parse", "HEAD") == shas[1]


def test_a_post_checkout_hook_or_a_filter_driver_sends_the_checkout_to_git(
    repo: tuple[Path, list[str]], tmp_path: Path
):
    path, shas = repo
    marker = tmp_path / "hook-ran"
    hook = path / ".git/hooks/post-checkout"
    hook.write_text(f'#!/bin/sh\necho "$3" >> {marker}\n')
    hook.chmod(0o755)
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[0])  # registered, then filled by git
    assert (worktree / "src/a.txt").read_text() == "one\n"
    assert git(worktree, "status", "--porcelain", "--untracked-files=all") == ""
    assert cli_reason(worktree, path / ".git/hooks") == "a post-checkout hook"
    marker.unlink(missing_ok=True)
    gitrepo.ensure_worktree(worktree, shas[1])
    assert gitrepo._worktree(worktree) is None
    assert marker.read_text().strip() == "1"  # git ran the hook: a branch-less checkout ("1" = whole tree)
    assert git(worktree, "rev-parse", "HEAD") == shas[1]
    hook.unlink()
    git(path, "config", "filter.lfs.smudge", "git-lfs smudge -- %f")
    assert cli_reason(worktree, path / ".git/hooks") == "filter drivers are configured (e.g. Git LFS)"
    git(path, "config", "--unset", "filter.lfs.smudge")
    git(path, "config", "core.sparseCheckout", "true")
    assert cli_reason(worktree, path / ".git/hooks") == "sparse checkout"
    git(path, "config", "core.sparseCheckout", "false")
    assert cli_reason(worktree, path / ".git/hooks") is None


def test_a_checkout_libgit2_refuses_falls_back_to_git(repo: tuple[Path, list[str]], tmp_path: Path):
    """A stale index.lock (a git killed mid-write) makes libgit2 fail; git then gives the error the user sees."""
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[0])
    admin = Path(git(worktree, "rev-parse", "--absolute-git-dir"))
    (admin / "index.lock").write_text("")
    with pytest.raises(RepoError, match=r"index\.lock"):
        gitrepo.ensure_worktree(worktree, shas[1])
    assert gitrepo._worktree(worktree) is None  # git takes over this worktree
    (admin / "index.lock").unlink()
    gitrepo.ensure_worktree(worktree, shas[1])
    assert git(worktree, "rev-parse", "HEAD") == shas[1]
