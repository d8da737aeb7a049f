"""GitRepo.ensure_worktree / clean_worktree: forced checkouts and cleans that never write outside the worktree.

Real repositories and worktrees; every result is checked with the git CLI, which is what a step's build sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bisect_helpers import cli_env
from git_holds import killed_in_reference_transaction

from bisector.vocab.errors import RepoError
from bisector.vocab.gitrepo import GitRepo


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit_all(path: Path, message: str) -> str:
    git(path, "add", "-A")
    git(path, "commit", "-qm", message)
    return git(path, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """Three commits: src/a.txt edited, src/b.txt added then removed, run.sh executable, build/ and *.log
    ignored."""
    path = tmp_path / "repo"
    (path / "src").mkdir(parents=True)
    git(path, "init", "-q")
    git(path, "config", "user.name", "t")
    git(path, "config", "user.email", "t@example.com")
    (path / ".gitignore").write_text("build/\n*.log\n*.o\n")
    (path / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (path / "run.sh").chmod(0o755)
    (path / "src/a.txt").write_text("one\n")
    shas = [commit_all(path, "commit 0")]
    (path / "src/a.txt").write_text("two\n")
    (path / "src/b.txt").write_text("b\n")
    shas.append(commit_all(path, "commit 1"))
    (path / "src/b.txt").unlink()
    shas.append(commit_all(path, "commit 2"))
    return path, shas


def status(worktree: Path) -> str:
    return git(worktree, "status", "--porcelain", "--untracked-files=all")


def test_a_checkout_gives_the_commits_tree_detached(repo: tuple[Path, list[str]], tmp_path: Path):
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[0])  # registered, then filled by git (an empty index is not clean)
    for sha, a_text, b_exists in ((shas[1], "two\n", True), (shas[2], "two\n", False), (shas[0], "one\n", False)):
        gitrepo.ensure_worktree(worktree, sha)
        assert git(worktree, "rev-parse", "HEAD") == sha
        assert (worktree / "src/a.txt").read_text() == a_text
        assert (worktree / "src/b.txt").exists() is b_exists
        assert status(worktree) == ""  # index, files and HEAD agree
        assert (worktree / "run.sh").stat().st_mode & 0o111  # the executable bit survives
    done = subprocess.run(["git", "symbolic-ref", "-q", "HEAD"], cwd=worktree, capture_output=True, check=False)
    assert done.returncode == 1  # detached
    assert git(path, "rev-parse", "HEAD") == shas[2]  # the main checkout did not move
    with pytest.raises(RepoError, match="checkout of 000000000000"):
        gitrepo.ensure_worktree(worktree, "0" * 40)


def test_a_lock_left_by_a_git_killed_mid_checkout_does_not_break_the_slot(repo: tuple[Path, list[str]], tmp_path: Path):
    """A worker killed (with its coordinator) while git checks out leaves index.lock in the worktree's admin
    directory; the slot's next holder checks out anyway, as nothing else can be using that worktree."""
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[0])
    admin = Path(git(worktree, "rev-parse", "--absolute-git-dir"))
    (admin / "index.lock").write_text("")  # what a killed `git checkout` leaves
    with pytest.raises(subprocess.CalledProcessError):  # git itself refuses while it is there
        git(worktree, "checkout", "-q", "--detach", shas[1])
    gitrepo.ensure_worktree(worktree, shas[1])
    assert git(worktree, "rev-parse", "HEAD") == shas[1]
    assert (worktree / "src/b.txt").read_text() == "b\n"
    assert not (admin / "index.lock").exists()
    assert status(worktree) == ""


def test_a_git_killed_while_it_moves_the_worktrees_head_does_not_break_the_slot(
    repo: tuple[Path, list[str]], tmp_path: Path
):
    """A checkout killed (a cancelled step's, or with its coordinator) while it holds the worktree's HEAD.lock leaves
    it in the admin directory; the slot's next holder checks out anyway. The kill comes while git waits in its
    reference-transaction hook with the lock taken."""
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[0])
    admin = Path(git(worktree, "rev-parse", "--absolute-git-dir"))
    checkout = ["git", "checkout", "-q", "--detach", shas[1]]
    killed_in_reference_transaction(path, '[ "$1" = prepared ]', tmp_path, checkout, cwd=worktree)
    assert (admin / "HEAD.lock").exists()
    gitrepo.ensure_worktree(worktree, shas[2])
    assert git(worktree, "rev-parse", "HEAD") == shas[2]
    assert not (admin / "HEAD.lock").exists()
    assert status(worktree) == ""


def test_a_worktree_add_killed_midway_is_added_again_by_the_slots_next_holder(
    repo: tuple[Path, list[str]], tmp_path: Path
):
    """A worker killed while `git worktree add` registers its slot leaves the registration locked ("initializing")
    with a null HEAD; the slot's next holder adds it again, so the user's repository lists no locked worktree. The
    kill comes while git waits in its reference-transaction hook, setting the new worktree's HEAD."""
    path, shas = repo
    worktree = tmp_path / "wt"
    add = (
        "import sys; from pathlib import Path; from bisector.vocab.gitrepo import GitRepo; "
        "GitRepo(Path(sys.argv[1])).ensure_worktree(Path(sys.argv[2]), sys.argv[3])"
    )
    argv = [sys.executable, "-c", add, str(path), str(worktree), shas[0]]
    killed_in_reference_transaction(path, '[ -e "$GIT_DIR/locked" ]', tmp_path, argv, env=cli_env())
    assert "locked" in git(path, "worktree", "list", "--porcelain")
    GitRepo(path).ensure_worktree(worktree, shas[1])
    assert git(worktree, "rev-parse", "HEAD") == shas[1]
    assert "locked" not in git(path, "worktree", "list", "--porcelain")
    assert status(worktree) == ""


def test_a_steps_leftovers_go_and_build_caches_stay(repo: tuple[Path, list[str]], tmp_path: Path):
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[1])
    (worktree / "src/a.txt").write_text("edited\n")  # a tracked file edited: git resets it
    (worktree / "out.txt").write_text("x")
    (worktree / "results/deep").mkdir(parents=True)
    (worktree / "results/deep/r.json").write_text("{}")
    (worktree / "empty").mkdir()
    (worktree / "mixed").mkdir()
    (worktree / "mixed/cache.o").write_text("o")  # ignored, inside an otherwise untracked directory
    (worktree / "mixed/notes.txt").write_text("n")
    (worktree / "build/obj").mkdir(parents=True)
    (worktree / "build/obj/k.o").write_text("o")
    (worktree / "step.log").write_text("log")
    gitrepo.ensure_worktree(worktree, shas[2])
    assert git(worktree, "rev-parse", "HEAD") == shas[2]
    assert status(worktree) == ""
    assert (worktree / "src/a.txt").read_text() == "two\n"
    for gone in ("out.txt", "results", "empty", "mixed/notes.txt", "src/b.txt"):
        assert not (worktree / gone).exists(), gone
    for kept in ("build/obj/k.o", "step.log", "mixed/cache.o"):  # ignored files stay, as git clean keeps them
        assert (worktree / kept).exists(), kept


def test_a_tracked_file_or_directory_replaced_by_a_symlink_is_not_written_through(
    repo: tuple[Path, list[str]], tmp_path: Path
):
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[0])
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "file.txt").write_text("keep me\n")
    (worktree / "src/a.txt").unlink()
    (worktree / "src/a.txt").symlink_to(outside / "file.txt")  # a step replaced a tracked file
    gitrepo.ensure_worktree(worktree, shas[1], clean=False)
    assert (outside / "file.txt").read_text() == "keep me\n"
    assert not (worktree / "src/a.txt").is_symlink()
    assert (worktree / "src/a.txt").read_text() == "two\n"
    (worktree / "src/b.txt").unlink()
    os.rename(worktree / "src", tmp_path / "moved-src")
    (worktree / "src").symlink_to(outside / "dir")  # ... and a tracked directory
    gitrepo.ensure_worktree(worktree, shas[1])
    assert list((outside / "dir").iterdir()) == []
    assert not (worktree / "src").is_symlink()
    assert status(worktree) == ""


def test_a_symlink_placed_between_the_tidy_and_the_next_checkout_is_not_written_through(
    repo: tuple[Path, list[str]], tmp_path: Path
):
    """The worker tidies right after a step, but a process that left the step's group (a daemonised build
    server) may still change the worktree while the worker waits: the checkout itself looks, every time."""
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[0])
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    gitrepo.clean_worktree(worktree)  # the tidy after a step that left the tracked files alone
    (worktree / "src/a.txt").unlink()
    (worktree / "src/a.txt").symlink_to(outside)  # ... then something still running replaces one
    gitrepo.ensure_worktree(worktree, shas[1], clean=False)
    assert outside.read_text() == "keep me\n"
    assert not (worktree / "src/a.txt").is_symlink()
    assert (worktree / "src/a.txt").read_text() == "two\n"
    assert status(worktree) == ""


def test_a_working_tree_encoding_attribute_is_applied(tmp_path: Path):
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.name", "t")
    git(path, "config", "user.email", "t@example.com")
    (path / ".gitattributes").write_text("*.txt working-tree-encoding=UTF-16LE\n")
    (path / "x.txt").write_bytes("one\n".encode("utf-16-le"))
    first = commit_all(path, "one")
    (path / "x.txt").write_bytes("two\n".encode("utf-16-le"))
    second = commit_all(path, "two")
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, first)
    gitrepo.ensure_worktree(worktree, second)
    assert (worktree / "x.txt").read_bytes() == "two\n".encode("utf-16-le")
    assert status(worktree) == ""


def test_clean_removes_a_nested_repository_as_git_clean_does(repo: tuple[Path, list[str]], tmp_path: Path):
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[1])
    (worktree / "left.txt").write_text("x")
    nested = worktree / "vendor/dep"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "f").write_text("f")
    gitrepo.clean_worktree(worktree)
    assert not (worktree / "left.txt").exists()
    assert not (worktree / "vendor").exists()
    assert git(worktree, "status", "--porcelain", "--untracked-files=all", "--ignored") == ""


def test_cleaning_a_removed_worktree_never_cleans_the_workers_own_directory(
    repo: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A step that deletes its worktree: the tidy after it must fail, not run git clean wherever the worker
    runs (GitPython falls back to the process's directory; a worker's is the user's checkout)."""
    path, shas = repo
    gitrepo = GitRepo(path)
    worktree = tmp_path / "wt"
    gitrepo.ensure_worktree(worktree, shas[1])
    (path / "my-notes.txt").write_text("untracked work of the user\n")
    (path / "src/a.txt").write_text("an edit of the user\n")
    monkeypatch.chdir(path)  # the worker's directory: the user's own checkout
    subprocess.run(["rm", "-rf", str(worktree)], check=True)
    with pytest.raises(RepoError):
        gitrepo.clean_worktree(worktree)
    assert (path / "my-notes.txt").exists()
    gitrepo.ensure_worktree(worktree, shas[2])  # healed: a fresh worktree, the user's files untouched
    assert (path / "my-notes.txt").read_text() == "untracked work of the user\n"
    assert (path / "src/a.txt").read_text() == "an edit of the user\n"


def test_a_worktree_whose_git_file_is_gone_never_acts_on_a_repository_above_it(
    repo: tuple[Path, list[str]], tmp_path: Path
):
    """A cache under a git checkout (a dotfiles home): a step removes its worktree's .git; git must not take the
    checkout above for the worktree's repository (clean would act on the user's checkout)."""
    path, shas = repo
    home = tmp_path / "home"
    home.mkdir()
    git(home, "init", "-q")
    (home / "tracked.txt").write_text("committed\n")
    git(home, "add", "tracked.txt")
    git(home, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "home")
    (home / "tracked.txt").write_text("edited, not committed\n")
    gitrepo = GitRepo(path)
    worktree = home / "cache" / "wt"
    gitrepo.ensure_worktree(worktree, shas[1])
    (worktree / ".git").unlink()
    (worktree / "left.txt").write_text("x\n")
    with pytest.raises(RepoError):
        gitrepo.clean_worktree(worktree)
    assert (home / "tracked.txt").read_text() == "edited, not committed\n"
    gitrepo.ensure_worktree(worktree, shas[2])  # healed
    assert git(worktree, "rev-parse", "HEAD") == shas[2]
    assert (home / "tracked.txt").read_text() == "edited, not committed\n"
