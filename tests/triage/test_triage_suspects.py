"""Suspect commits from real repositories: the bisect's first-parent range, ranked by the files named."""

from __future__ import annotations

from pathlib import Path

from triage_repo import commit, git, init_repo, results, serving_repo

from bisector.triage import triage_runs
from bisector.triage.suspects import rank_suspects
from bisector.vocab.gitrepo import GitRepo


def test_commits_touching_named_files_first_then_newest(tmp_path: Path):
    repo = serving_repo(tmp_path / "repo")
    results(tmp_path, "good.xml", repo.good, "good.xml")
    results(tmp_path, "bad.xml", repo.serving, "bad.xml")
    report = triage_runs(tmp_path / "good.xml", tmp_path / "bad.xml", repo=repo.path)
    ranked = [(s.commit.sha, s.commit.pr, s.touched) for s in report.suspects]
    assert ranked == [
        (repo.gemm, 12, ("kernels/gemm.py",)),  # named by an absolute traceback path and a relative one
        (repo.serving, 13, ()),
        (repo.docs, 11, ()),
    ]
    assert report.suspects[0].commit.subject == "Tune the GEMM dispatch threshold (#12)"
    assert report.suspects[2].commit.author == "Ann <ann@example.com>"


def test_without_regressions_the_range_is_newest_first_and_one_commit_has_none(tmp_path: Path):
    repo = serving_repo(tmp_path / "repo")
    git_repo = GitRepo(repo.path)
    assert [s.commit.sha for s in rank_suspects(git_repo, repo.good, repo.serving, [])] == [
        repo.serving,
        repo.gemm,
        repo.docs,
    ]
    assert rank_suspects(git_repo, repo.serving, repo.serving, []) == []


def test_a_merged_branch_is_one_suspect_on_the_first_parent_chain(tmp_path: Path):
    path = init_repo(tmp_path / "repo")
    good = commit(path, "base", {"a.txt": "1\n"})
    git(path, "checkout", "-q", "-b", "feature")
    inner = commit(path, "feature work", {"b.txt": "1\n"})
    git(path, "checkout", "-q", "main")
    commit(path, "main work (#5)", {"c.txt": "1\n"})
    git(path, "merge", "-q", "--no-ff", "-m", "Merge pull request #7 from dev/feature", "feature")
    suspects = rank_suspects(GitRepo(path), good, git(path, "rev-parse", "HEAD"), [])
    assert [(s.commit.subject, s.commit.pr) for s in suspects] == [
        ("Merge pull request #7 from dev/feature", 7),
        ("main work (#5)", 5),
    ]
    assert inner not in {s.commit.sha for s in suspects}
