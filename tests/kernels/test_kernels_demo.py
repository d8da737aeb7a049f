"""The demo history: culprit where init says, the diff touches the table, deterministic, bench per commit."""

import ast
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from bisector.kernels import demo

DECODER_ROWS = {"(144, 7168)", "(896, 7168)", "(1536, 128)", "(144, 1024)", "(896, 1024)"}


def _git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return demo.init_demo_repo(tmp_path_factory.mktemp("demo") / "repo", commits=30, seed=3)


@pytest.fixture(scope="module")
def default(tmp_path_factory):
    start = time.perf_counter()
    repo = demo.init_demo_repo(tmp_path_factory.mktemp("demo") / "repo")
    assert time.perf_counter() - start < 20
    return repo


@pytest.mark.parametrize("name", ["small", "default"])
def test_endpoints_and_culprit_are_where_init_says(request, name):
    repo = request.getfixturevalue(name)
    expected = 30 if name == "small" else 200
    assert repo.commits == expected
    assert _git(repo.path, "rev-parse", demo.GOOD_TAG) == repo.good
    assert _git(repo.path, "rev-parse", "HEAD") == repo.bad
    assert _git(repo.path, "symbolic-ref", "--short", "HEAD") == "main"
    subprocess.run(["git", "merge-base", "--is-ancestor", repo.good, repo.bad], cwd=repo.path, check=True)
    chain = _git(repo.path, "rev-list", "--first-parent", "--reverse", f"{repo.good}..{repo.bad}").split()
    assert len(chain) == expected
    position = chain.index(repo.culprit)
    assert 0 < position < expected - 1
    assert _git(repo.path, "log", "-1", "--format=%s", repo.culprit) == repo.culprit_subject
    assert re.search(r"\(#\d+\)$", repo.culprit_subject)
    assert _git(repo.path, "status", "--porcelain") == ""


def test_culprit_diff_moves_the_decoder_rows_to_mma_from_2_among_unrelated_lines(small):
    diff = _git(small.path, "diff", f"{small.culprit}^", small.culprit)
    removed = {m[1] for m in re.finditer(r"^-\s+(\(\d+, \d+\)): (?:SIMT_ONLY|1),", diff, re.M)}
    added = {m[1] for m in re.finditer(r"^\+\s+(\(\d+, \d+\)): 2,", diff, re.M)}
    assert removed == DECODER_ROWS
    assert added >= DECODER_ROWS
    assert "_TUNED_MMA_MIN_M" in _git(
        small.path, "diff", "-U40", f"{small.culprit}^", small.culprit, "--", "kernels/tiny_gemm.py"
    )
    files = _git(small.path, "diff", "--name-only", f"{small.culprit}^", small.culprit).split()
    assert "kernels/tiny_gemm.py" in files
    assert len(files) > 1


def test_no_other_commit_touches_the_decoder_rows(default):
    log = _git(
        default.path,
        "log",
        "--first-parent",
        "-p",
        "--format=COMMIT %H",
        f"{default.good}..{default.bad}",
        "--",
        "kernels/tiny_gemm.py",
    )
    touching = set()
    for chunk in log.split("COMMIT ")[1:]:
        sha, _, body = chunk.partition("\n")
        if any(re.search(rf"^[-+]\s+{re.escape(row)}:", body, re.M) for row in DECODER_ROWS):
            touching.add(sha)
    assert touching == {default.culprit}


def test_history_looks_like_a_real_main_branch(default):
    merges = _git(default.path, "rev-list", "--first-parent", "--merges", f"{default.good}..{default.bad}").split()
    assert len(merges) >= 3
    subjects = _git(default.path, "log", "--first-parent", "--format=%s", f"{default.good}..{default.bad}").splitlines()
    assert all(re.search(r"\(#\d+\)$|^Merge pull request #\d+ from ", s) for s in subjects)
    names = _git(default.path, "log", "--format=%an", "main").splitlines()
    assert len(set(names)) >= 5
    touched = set(_git(default.path, "log", "--format=", "--name-only", f"{default.good}..{default.bad}").split())
    assert any(p.startswith("docs/") for p in touched)
    assert any(p.startswith("tests/") for p in touched)
    assert any(p.startswith(".github/") for p in touched)
    assert any(p.startswith("kernels/ops/") for p in touched)


def test_every_commit_keeps_the_table_a_literal(small):
    for sha in _git(small.path, "rev-list", "main").split()[:12]:
        source = _git(small.path, "show", f"{sha}:kernels/tiny_gemm.py")
        ast.parse(source)
        assert "_TUNED_MMA_MIN_M: dict[tuple[int, int], int] = {" in source


def test_same_seed_same_shas_other_seed_other_history(tmp_path, small):
    again = demo.init_demo_repo(tmp_path / "again", commits=30, seed=3)
    assert (again.good, again.bad, again.culprit) == (small.good, small.bad, small.culprit)
    other = demo.init_demo_repo(tmp_path / "other", commits=30, seed=4)
    assert other.bad != small.bad


def test_many_commits_generate_quickly(tmp_path):
    start = time.perf_counter()
    big = demo.init_demo_repo(tmp_path / "big", commits=1000, seed=1)
    assert time.perf_counter() - start < 30
    assert big.commits == 1000


def test_init_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(demo.DemoError, match="not an empty directory"):
        demo.init_demo_repo(tmp_path)
    with pytest.raises(demo.DemoError, match="at least 3"):
        demo.init_demo_repo(tmp_path / "new", commits=2)


def _bench_in_checkout(repo, sha, where):
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(where), sha], cwd=repo.path, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELS_")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        repo.run_cmd, shell=True, cwd=where, capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    match = re.search(repo.metric_regex, done.stdout)
    assert match, done.stdout
    assert f"{where}/kernels/" in _imported_from(repo, where, env)
    assert json.loads(done.stdout.splitlines()[-1])["config"]["prompts"] == demo.DEMO_PROMPTS  # a step's cost
    return float(match[1])


def _imported_from(repo, where, env):
    python = repo.run_cmd.split(" -m ")[0]
    return subprocess.run(
        f"{python} -c 'import kernels.tiny_gemm as t; print(t.__file__)'",
        shell=True,
        cwd=where,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout


@pytest.mark.kernels
def test_bench_in_checkouts_measures_each_commits_table(small, tmp_path):
    assert small.metric_regex == r"accept length: ([0-9.]+)"
    assert small.expect == ">= 4.0"
    assert _bench_in_checkout(small, f"{small.culprit}^", tmp_path / "parent") == 4.0
    assert _bench_in_checkout(small, small.culprit, tmp_path / "culprit") < 4.0


def test_describe_names_endpoints(small):
    text = demo.describe(small)
    assert small.good in text
    assert small.bad in text
    assert "accept-length" in text


def test_demo_tree_is_self_contained(small):
    files = set(_git(small.path, "ls-files").split())
    assert {f"kernels/{name}" for name in demo.STACK_FILES} <= files
    assert "kernels/demo.py" not in files
    assert Path(small.path, ".gitignore").read_text().startswith("__pycache__/")
