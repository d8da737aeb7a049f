"""GitRepo's reading side: opening, commits, parents, files, trees and exports, each checked against the git CLI.

Real repositories made here; GitRepo runs git itself, so what it reports must be what git says.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bisector.vocab.errors import RepoError
from bisector.vocab.gitrepo import GitRepo


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """main: base -> change (a two-line message) -> merge of side (one commit that adds side.txt)."""
    path = tmp_path / "repo"
    (path / "src").mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Ada Lovelace")
    git(path, "config", "user.email", "ada@example.com")
    (path / "src/a.txt").write_text("one\n\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "base")
    shas = {"base": git(path, "rev-parse", "HEAD")}
    (path / "src/a.txt").write_text("two\n")
    git(path, "commit", "-qam", "change the kernel (#42)\nsecond line of the subject's paragraph\n\nbody")
    shas["change"] = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-qb", "side", shas["base"])
    (path / "side.txt").write_text("side\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "side")
    shas["side"] = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "main")
    git(path, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    shas["merge"] = git(path, "rev-parse", "HEAD")
    return path, shas


def test_a_subdirectory_opens_its_repository_at_the_root(history: tuple[Path, dict[str, str]]):
    path, shas = history
    repo = GitRepo(path / "src")
    assert repo.root == path.resolve()
    assert repo.resolve("main") == shas["merge"]
    assert repo.resolve(shas["change"][:8]) == shas["change"]


@pytest.mark.parametrize("make", ["missing", "plain directory", "bare"])
def test_what_is_not_a_work_tree_is_refused_in_one_line(tmp_path: Path, make: str):
    path = tmp_path / "target"
    if make == "plain directory":
        path.mkdir()
    elif make == "bare":
        git(tmp_path, "init", "-q", "--bare", str(path))
    expected = "bare repositories are not supported" if make == "bare" else "not a git repository"
    with pytest.raises(RepoError, match=expected) as raised:
        GitRepo(path)
    assert "\n" not in str(raised.value)


def test_a_repository_git_refuses_to_open_says_why_in_one_line(history: tuple[Path, dict[str, str]]):
    with pytest.raises(RepoError, match=r"git cannot open .*must be run in a work tree") as raised:
        GitRepo(history[0] / ".git")
    assert "\n" not in str(raised.value)


def test_a_commit_reads_as_git_log_shows_it(history: tuple[Path, dict[str, str]]):
    path, shas = history
    commit = GitRepo(path).commit(shas["change"], position=7)
    assert commit.sha == shas["change"]
    assert commit.position == 7
    assert commit.subject == "change the kernel (#42)"  # the message's first line (git log %s joins the paragraph)
    assert commit.pr == 42
    assert commit.author == "Ada Lovelace <ada@example.com>"
    assert commit.date == datetime.fromtimestamp(int(git(path, "log", "-1", "--format=%at", shas["change"])), UTC)


def test_parents_and_a_merges_branch(history: tuple[Path, dict[str, str]]):
    path, shas = history
    repo = GitRepo(path)
    assert repo.parents(shas["merge"]) == [shas["change"], shas["side"]]
    assert repo.parents(shas["base"]) == []
    assert repo.merged_branch(shas["merge"]) == [shas["side"]]
    assert repo.merged_branch(shas["change"]) == []


def test_an_unknown_commit_is_a_repo_error(history: tuple[Path, dict[str, str]]):
    repo = GitRepo(history[0])
    with pytest.raises(RepoError, match="reading commit"):
        repo.commit("0" * 40)
    with pytest.raises(RepoError, match="reading commit"):
        repo.parents("no-such-ref")


def test_the_range_lists_the_first_parent_chain(history: tuple[Path, dict[str, str]]):
    path, shas = history
    listed = GitRepo(path).range_for_bisect(shas["base"], shas["merge"])
    expected = [(0, shas["base"]), (1, shas["change"]), (2, shas["merge"])]
    assert [(c.position, c.sha) for c in listed.described()] == expected  # a short range: described whole
    assert listed[1].subject == git(path, "log", "-1", "--format=%s", shas["change"])


def test_files_trees_and_config(history: tuple[Path, dict[str, str]]):
    path, shas = history
    repo = GitRepo(path)
    assert repo.show_file(shas["base"], "src/a.txt") == "one\n"  # as git prints it, less its last newline
    assert repo.show_file(shas["base"], "side.txt") is None
    assert repo.tree_hash(shas["merge"], "src/") == git(path, "rev-parse", f"{shas['merge']}:src")
    assert repo.tree_hash(shas["merge"]) == git(path, "rev-parse", f"{shas['merge']}^{{tree}}")
    assert repo.tree_hash(shas["base"], "side.txt") is None
    assert repo.diff(shas["base"], shas["change"], "src") == git(path, "diff", shas["base"], shas["change"], "src")
    assert repo.origin_url() is None
    git(path, "remote", "add", "origin", "https://example.com/stack.git")
    assert repo.origin_url() == "https://example.com/stack.git"


def test_an_exported_tree_is_the_commits_files_without_git(history: tuple[Path, dict[str, str]], tmp_path: Path):
    path, shas = history
    destination = tmp_path / "export"
    GitRepo(path).export_tree(shas["merge"], destination)
    files = sorted(str(p.relative_to(destination)) for p in destination.rglob("*") if p.is_file())
    assert files == ["side.txt", "src/a.txt"]
    assert (destination / "src/a.txt").read_text() == "two\n"
    with pytest.raises(RepoError, match="exporting the tree"):
        GitRepo(path).export_tree("0" * 40, tmp_path / "other")


def test_a_git_killed_by_a_signal_is_named_by_the_signal(tmp_path: Path) -> None:
    """A git that a signal ended (the OOM killer, a kill -9) is reported as killed, not as "exited -9"."""
    from bisector.vocab.gitcommand import GitCommandError, run_git

    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "git").write_text("#!/bin/sh\nkill -KILL $$\n")
    (shims / "git").chmod(0o755)
    with pytest.raises(GitCommandError, match=r"^git rev-parse was killed by SIGKILL$"):
        run_git(tmp_path, "rev-parse", "HEAD", env={"PATH": f"{shims}:/usr/bin:/bin"})
