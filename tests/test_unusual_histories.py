"""`bisect start` on unusual but real histories and revisions: octopus merges, a merge named as the culprit,
ambiguous SHAs, shallow clones, paths no commit touches. Real git repositories, a real store, real test processes."""

from __future__ import annotations

import html
import json
import shlex
import subprocess
from pathlib import Path

import httpx
from bisect_helpers import run_cli, synthetic_spec
from dashboard.server import running_dashboard  # a real `bisect dashboard` process

from bisector.db.store import Store
from bisector.report.rendered import render
from bisector.runner.coordinator import Coordinator
from bisector.runner.observer import SilentObserver
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus

TEST_SH = 'test "$(cat verdict)" = good\n'


class Repo:
    """A repository scripted commit by commit; each commit's `verdict` file says what the test makes of it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.path), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        return done.stdout.strip()

    def commit(self, message: str, **files: str) -> str:
        for name, text in files.items():
            (self.path / name).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-qm", message)
        return self.git("rev-parse", "HEAD")


def test_all_parents_finds_a_culprit_in_an_octopus_merges_third_parent(tmp_path: Path, store: Store):
    """main merges branches a, b and c at once; b2 breaks the test. Branch a alone is good, so the merge is not the
    answer: its other branches are descended into in turn, as `git bisect run` finds b2."""
    repo = Repo(tmp_path / "repo")
    good = repo.commit("root", **{"test.sh": TEST_SH, "verdict": "good\n"})
    fork = repo.commit("m1", m="1\n")
    branches = {}
    for name, commits in (("a", ["a1", "a2"]), ("b", ["b1", "b2", "b3"]), ("c", ["c1"])):
        repo.git("checkout", "-q", "-b", name, fork)
        for message in commits:
            files = {f"{message}.txt": message, **({"verdict": "bad\n"} if message == "b2" else {})}
            branches[message] = repo.commit(message, **files)
    repo.git("checkout", "-q", "main")
    repo.commit("m2", m="2\n")
    repo.git("merge", "-q", "--no-ff", "-m", "octopus", "a", "b", "c")
    tip = repo.commit("m3", m="3\n")
    coordinator = Coordinator(store, make_executor, poll_interval_s=0.05)
    spec = synthetic_spec(repo.path, good, tip, build=None, all_parents=True, workers=1)
    record = coordinator.start(spec)
    assert (record.status, record.first_bad, record.last_good) == (BisectStatus.FOUND, branches["b2"], branches["b1"])


def test_all_parents_passes_over_an_octopus_parent_that_brought_nothing(tmp_path: Path, store: Store):
    """An octopus merge made by a tool other than `git merge` (which drops such parents): its second parent is an
    ancestor of its first, so that branch brought nothing. The third parent's branch still holds the culprit."""
    repo = Repo(tmp_path / "repo")
    good = repo.commit("root", **{"test.sh": TEST_SH, "verdict": "good\n"})
    stale = repo.commit("m1", m="1\n")
    repo.git("checkout", "-q", "-b", "c", stale)
    c1 = repo.commit("c1", c1="c1")
    c2 = repo.commit("c2", verdict="bad\n")
    repo.git("checkout", "-q", "main")
    first_parent = repo.commit("m2", m="2\n")
    repo.git("merge", "-q", "--no-ff", "-m", "c", "c")
    tree = repo.git("rev-parse", "HEAD^{tree}")
    octopus = repo.git("commit-tree", tree, "-p", first_parent, "-p", stale, "-p", c2, "-m", "octopus")
    repo.git("reset", "-q", "--hard", octopus)
    tip = repo.commit("m3", m="3\n")
    notes = NotesHeard()
    coordinator = Coordinator(store, make_executor, poll_interval_s=0.05, observer=notes)
    record = coordinator.start(synthetic_spec(repo.path, good, tip, build=None, all_parents=True, workers=1))
    assert (record.status, record.first_bad, record.last_good) == (BisectStatus.FOUND, c2, c1)
    assert [phase["parent"] for phase in record.extra["merge_phases"]] == [2]  # git's third parent
    descents = [note for note in notes.heard if note.startswith(f"merge {octopus[:12]} is bad")]
    assert descents == [
        f"merge {octopus[:12]} is bad: bisecting the 2 commit(s) it merged through its parent 3 (the parents before "
        "brought no commit or their branches are good alone)"
    ]


def test_a_merge_named_by_the_first_parent_search_says_what_it_brought_and_the_command_that_searches_it(
    tmp_path: Path,
):
    """main merges a branch of three commits whose second breaks the test: the first-parent search names the merge,
    and every face says that its three commits were not searched and gives the command that searches them, which
    names the branch's culprit."""
    repo = Repo(tmp_path / "repo")
    good = repo.commit("root", **{"test.sh": TEST_SH, "verdict": "good\n"})
    fork = repo.commit("m1", m="1\n")
    repo.git("checkout", "-q", "-b", "side", fork)
    s1 = repo.commit("s1", s1="1")
    s2 = repo.commit("s2", verdict="bad\n")
    repo.commit("s3", s3="3")
    repo.git("checkout", "-q", "main")
    first_parent = repo.commit("m2", m="2\n")
    repo.git("merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = repo.git("rev-parse", "HEAD")
    repo.commit("m3", m="3\n")
    db = tmp_path / "b.db"
    start = ["start", "--repo", str(repo.path), "--good", good, "--bad", "main", "--run", "bash test.sh",
             "--executor", "inprocess", "--no-explain"]  # fmt: skip
    done = run_cli(*start, "--format", "json", db=db)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == merge
    command = report["unsearched_merge"]["command"]
    assert report["unsearched_merge"]["commits"] == 3
    words = f"merge {merge[:12]} brought 3 commit(s) that were not searched (the search follows first parents)"
    line = f"{words}; to search them: {command}"
    assert line in unwrapped(run_cli("report", "1", db=db).stdout)
    assert line in run_cli("status", "1", db=db).stdout.splitlines()
    markdown = run_cli("report", "1", "--format", "markdown", db=db).stdout
    assert f"**Not searched:** {words}; to search them: `{command}`" in markdown.splitlines()
    with running_dashboard(f"sqlite:///{db}", tmp_path / "logs") as base:
        page = httpx.get(f"{base}/bisects/1", timeout=60.0).text
    assert f'{words}; to search them: <code id="search-merge-command">{command}</code>' in html.unescape(page)

    argv = shlex.split(command)
    assert argv[:2] == ["bisect", "start"]
    assert {"--all-parents", "--no-explain"} <= set(argv)
    assert (argv[argv.index("--good") + 1], argv[argv.index("--bad") + 1]) == (first_parent, merge)
    searched = run_cli(*argv[1:], "--format", "json", db=db)
    assert searched.returncode == 0, searched.stderr
    branch = json.loads(searched.stdout)
    assert (branch["first_bad"]["sha"], branch["last_good"]["sha"]) == (s2, s1)
    assert branch["unsearched_merge"] is None


def test_a_merge_that_brought_no_commit_or_one_named_with_all_parents_has_nothing_unsearched(
    tmp_path: Path, store: Store
):
    """A merge that breaks the test itself: made by a tool other than `git merge` with a stale second parent (an
    ancestor of its first: it brought nothing), or a real one named by --all-parents because its branch alone is
    good. Neither report says anything was not searched."""
    repo = Repo(tmp_path / "repo")
    good = repo.commit("root", **{"test.sh": TEST_SH, "verdict": "good\n"})
    stale = repo.commit("m1", m="1\n")
    repo.git("checkout", "-q", "-b", "side", stale)
    side = repo.commit("s1", s1="1")
    repo.git("checkout", "-q", "main")
    first_parent = repo.commit("m2", m="2\n")
    (repo.path / "verdict").write_text("bad\n")
    repo.git("add", "-A")
    tree = repo.git("write-tree")
    empty = repo.git("commit-tree", tree, "-p", first_parent, "-p", stale, "-m", "merge of nothing, breaking")
    real = repo.git("commit-tree", tree, "-p", first_parent, "-p", side, "-m", "merge of side, breaking")
    coordinator = Coordinator(store, make_executor, poll_interval_s=0.05)
    for merge, all_parents in ((empty, False), (real, True)):
        spec = synthetic_spec(repo.path, good, merge, build=None, all_parents=all_parents, workers=1)
        record = coordinator.start(spec)
        assert (record.status, record.first_bad) == (BisectStatus.FOUND, merge)
        assert json.loads(render(store, record.id, "report", "json"))["unsearched_merge"] is None
        for view, output_format in (("report", "text"), ("report", "markdown"), ("status", "text")):
            assert "not searched" not in render(store, record.id, view, output_format).lower()
    assert repo.git("rev-list", "--count", real, f"^{first_parent}") == "2"  # the real merge did bring its branch


def unwrapped(text: str) -> str:
    """The text report's words with the panel's borders and the line breaks its width made taken out."""
    return " ".join(text.replace("│", " ").split())


class NotesHeard(SilentObserver):
    def __init__(self) -> None:
        self.heard: list[str] = []

    def note(self, message: str) -> None:
        self.heard.append(message)


def _many_commits(repo: Repo, count: int) -> list[str]:
    """count commits on main after its first, made by one `git fast-import` with fixed dates (so the same SHAs each
    run); their SHAs, oldest first."""
    stream = "".join(
        f"commit refs/heads/main\ncommitter t <t@example.com> {1700000000 + i} +0000\ndata {len(f'c{i}')}\nc{i}\n"
        + ("from refs/heads/main^0\n" if i == 0 else "")
        + f"M 644 inline n\ndata {len(str(i))}\n{i}\n\n"
        for i in range(count)
    )
    subprocess.run(["git", "-C", str(repo.path), "fast-import", "--quiet"], input=stream, text=True, check=True)
    return repo.git("rev-list", "--reverse", "main", "^main~" + str(count)).split()


def test_an_ambiguous_short_sha_is_named_so_not_unknown(tmp_path: Path):
    repo = Repo(tmp_path / "repo")
    repo.commit("root", **{"test.sh": TEST_SH, "verdict": "good\n"})
    shas = _many_commits(repo, 1000)
    by_prefix: dict[str, list[str]] = {}
    for sha in shas:
        by_prefix.setdefault(sha[:4], []).append(sha)
    prefix, sharing = next((p, s) for p, s in by_prefix.items() if len(s) > 1)
    done = run_cli("start", "--repo", str(repo.path), "--good", prefix, "--bad", "main", "--run", "true",
                   db=tmp_path / "bisect.db")  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line
    assert f"ambiguous revision {prefix!r}" in line
    assert line.endswith("give more of the SHA")
    named = line.split("it names ")[1].split(";")[0].split(", ")
    assert sorted(next(sha for sha in sharing if sha.startswith(short)) for short in named) == sorted(sharing)


def test_a_good_commit_beyond_a_shallow_clones_boundary_says_to_fetch_the_rest(tmp_path: Path):
    """A CI checkout of depth 3 with the good tag fetched on its own: git cannot see good below bad, and neither
    can a date before the clone's oldest commit. Each is one line telling how to fetch the rest, never a bare
    `not an ancestor` (which the full history would contradict)."""
    origin = Repo(tmp_path / "origin")
    for i in range(8):
        origin.commit(f"c{i}", **{"test.sh": TEST_SH, "verdict": "good\n", "n": str(i)})
    origin.git("tag", "old", "HEAD~6")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "3", f"file://{origin.path}", str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "fetch", "-q", "--depth", "1", "origin", "tag", "old"], check=True)
    for good in ("old", "2000-01-01"):
        done = run_cli("start", "--repo", str(clone), "--good", good, "--bad", "HEAD", "--run", "true",
                       db=tmp_path / "bisect.db")  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1
        assert "shallow clone" in done.stderr
        assert f"git -C {clone} fetch --unshallow" in done.stderr


def test_paths_that_no_commit_of_the_range_touches_are_refused(tmp_path: Path):
    """`-- PATH` naming nothing the range changed (a typo): git bisect finds no testable commit; naming the bad
    commit as the first bad one would blame a commit that does not touch the paths."""
    repo = Repo(tmp_path / "repo")
    good = repo.commit("root", **{"test.sh": TEST_SH, "verdict": "good\n"})
    repo.commit("culprit", verdict="bad\n")
    repo.commit("after", other="1\n")
    db = tmp_path / "bisect.db"
    done = run_cli("start", "--repo", str(repo.path), "--good", good, "--bad", "main", "--run", "bash test.sh",
                   "--", "no/such/file", db=db)  # fmt: skip
    assert done.returncode == 2, done.stderr
    bad = repo.git("rev-parse", "main")
    why = f"no commit after good {good[:12]} up to bad {bad[:12]} touches no/such/file: check the paths"
    assert done.stderr == f"bisect: error: {why}\n"
    found = run_cli("start", "--repo", str(repo.path), "--good", good, "--bad", "main", "--run", "bash test.sh",
                    "--no-explain", "--", "verdict", db=db)  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert "culprit" in found.stdout


def test_good_given_twice_is_refused_not_overridden(tmp_path: Path):
    """A `git bisect good A B` habit: two --good flags. Taking the last one alone would bisect another range than
    the one asked for."""
    repo = Repo(tmp_path / "repo")
    first = repo.commit("root", **{"test.sh": TEST_SH, "verdict": "good\n"})
    second = repo.commit("c1", n="1\n")
    repo.commit("c2", verdict="bad\n")
    cases = [
        (["--good", first, "--good", second, "--bad", "main"], f"--good given 2 times ({first}, {second})"),
        (["--good", first, "--bad", "main", "--bad", "HEAD"], "--bad given 2 times (main, HEAD)"),
    ]
    for flags, named in cases:
        done = run_cli("start", "--repo", str(repo.path), *flags, "--run", "bash test.sh", db=tmp_path / "bisect.db")
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"bisect: error: {named}: give one, ")
        assert done.stderr.count("\n") == 1
    assert not (tmp_path / "bisect.db").exists()  # refused before a store is opened


def test_a_test_command_that_does_not_exist_is_named_at_the_good_endpoint(tmp_path: Path):
    """A typo in --run: bash exits 127 at every commit. The answer is that the good endpoint tested bad, and why
    in words (git bisect run calls the code bogus), not a bare number."""
    repo = Repo(tmp_path / "repo")
    good = repo.commit("root", **{"test.sh": TEST_SH, "verdict": "good\n"})
    repo.commit("c1", n="1\n")
    done = run_cli("start", "--repo", str(repo.path), "--good", good, "--bad", "main", "--run", "no-such-command-xyz",
                   "--format", "json", db=tmp_path / "bisect.db")  # fmt: skip
    assert done.returncode == 3, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "endpoints_mismatch"
    assert report["message"] == f"the good endpoint {good[:12]} tested bad (exit code 127: command not found)"


def test_all_parents_with_paths_descends_into_a_merge_whose_first_parent_left_the_paths_alone(tmp_path: Path):
    """`--all-parents -- src`: the merge's first parent touches nothing under src, so it is no candidate; the descent
    starts from the last good candidate before the merge instead (it raised KeyError)."""
    repo = Repo(tmp_path / "repo")
    (repo.path / "src").mkdir()
    good = repo.commit("root", **{"test.sh": 'test "$(cat src/verdict)" = good\n', "src/verdict": "good\n"})
    fork = repo.commit("m1", **{"src/m": "1\n"})
    repo.git("checkout", "-q", "-b", "side", fork)
    repo.commit("s1", **{"src/s1": "1"})
    s2 = repo.commit("s2", **{"src/verdict": "bad\n"})
    repo.git("checkout", "-q", "main")
    repo.commit("m2", docs="2\n")  # the merge's first parent: outside src
    repo.git("merge", "-q", "--no-ff", "-m", "merge side", "side")
    repo.commit("m3", **{"src/m": "3\n"})
    done = run_cli("start", "--repo", str(repo.path), "--good", good, "--bad", "main", "--run", "bash test.sh",
                   "--executor", "inprocess", "--no-explain", "--all-parents", "--format", "json", "--", "src",
                   db=tmp_path / "b.db")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["first_bad"]["sha"] == s2
