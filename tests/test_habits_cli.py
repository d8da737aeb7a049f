"""git-bisect habits as a user meets them: terms, -- paths, bisect log (replayed by real git), replay, mark,
worktrees, --db as a path, read-only stores, the short status, the man page. Real repos, real subprocesses."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bisect_helpers import stored_rows
from synthetic import culprit_history, write_history
from test_cli import ROOT, bisect, start_args

from bisector.cli import main
from bisector.cli.man import iter_commands, render_man


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "T",
           "GIT_COMMITTER_EMAIL": "t@e"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout


def git_replay(repo: Path, log: str, tmp_path: Path) -> str:
    """What real `git bisect replay` concludes from log (its own `git bisect log` afterwards)."""
    clone = tmp_path / "replay-clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    (tmp_path / "replayed.log").write_text(log)
    git(clone, "bisect", "replay", str(tmp_path / "replayed.log"))
    return git(clone, "bisect", "log")


@pytest.fixture
def history(tmp_path: Path):
    return culprit_history(tmp_path / "repo", 40, 23)


def test_custom_terms_name_the_answer_and_the_log_replays_in_git(tmp_path: Path, history):
    db = tmp_path / "b.db"
    done = bisect(*start_args(history, "--term-old", "fast", "--term-new", "slow", "--format", "json"), db=db)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["terms"] == {"old": "fast", "new": "slow"}
    assert {s["term"] for s in report["steps"]} == {"fast", "slow"}
    assert report["message"] == f"first slow commit: {history.shas[23][:12]} change 23 (#2023)"
    text = bisect("report", "1", db=db).stdout
    assert f"first slow commit: {history.shas[23]}" in text
    assert f"last fast commit: {history.shas[22]}" in text
    log = bisect("log", "1", db=db).stdout
    assert log.startswith("git bisect start '--term-old' 'fast' '--term-new' 'slow'\n# slow: [")
    assert f"git bisect fast {history.shas[22]}\n" in log
    assert log.endswith(f"# first slow commit: [{history.shas[23]}] change 23 (#2023)\n")
    replayed = git_replay(history.path, log, tmp_path)
    assert f"# first slow commit: [{history.shas[23]}]" in replayed


def test_default_log_replays_in_git_to_the_same_first_bad_commit(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history, "--workers", "3"), db=db).returncode == 0
    log = bisect("log", "1", db=db).stdout
    lines = log.splitlines()
    assert lines[0] == "git bisect start"
    assert lines[1:3] == [f"# bad: [{history.shas[40]}] change 40 (#2040)", f"git bisect bad {history.shas[40]}"]
    assert lines[3:5] == [f"# good: [{history.shas[0]}] change 0 (#2000)", f"git bisect good {history.shas[0]}"]
    assert f"# first bad commit: [{history.shas[23]}]" in git_replay(history.path, log, tmp_path)


@pytest.mark.parametrize(("old", "new", "message"), [("bad", "good", "use --find-fix"), ("same", "same", "must differ"),
                                                     ("start", "slow", "not a git command")])  # fmt: skip
def test_bad_terms_are_one_line(tmp_path: Path, history, old: str, new: str, message: str):
    done = bisect(*start_args(history, "--term-old", old, "--term-new", new), db=tmp_path / "b.db")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr


def paths_repo(path: Path) -> list[str]:
    """12 commits alternating src/ and docs/; src/value turns bad at commit 7. Returns the SHAs."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "src").mkdir()
    (path / "docs").mkdir()
    (path / "test.sh").write_text("grep -q good src/value\n")
    shas = []
    for index in range(12):
        if index % 2 or index == 0:
            (path / "src" / "value").write_text(("bad" if index >= 7 else "good") + f" {index}\n")
        if index % 2 == 0:
            (path / "docs" / "notes").write_text(f"notes {index}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"commit {index}")
        shas.append(git(path, "rev-parse", "HEAD").strip())
    return shas


def test_paths_limit_the_candidates_to_commits_touching_them(tmp_path: Path):
    repo = tmp_path / "repo"
    shas = paths_repo(repo)
    args = ["start", "--repo", str(repo), "--good", shas[0], "--bad", shas[10], "--run", "bash test.sh"]
    done = bisect(*args, "--format", "json", "--", "src", db=tmp_path / "b.db")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["paths"] == ["src"]
    assert report["first_bad"]["sha"] == shas[7]
    assert report["candidates"] == 7  # the endpoints and commits 1, 3, 5, 7, 9; 10 is the bad endpoint
    assert {s["sha"] for s in report["steps"]} <= {shas[i] for i in (0, 1, 3, 5, 7, 9, 10)}
    log = bisect("log", "1", db=tmp_path / "b.db").stdout
    assert log.startswith("git bisect start '--' 'src'\n")
    assert f"# first bad commit: [{shas[7]}]" in git_replay(repo, log, tmp_path)


def test_replay_takes_a_git_bisect_log_as_manual_steps_and_tests_the_rest(tmp_path: Path, history):
    repo = history.path
    git(repo, "bisect", "start")
    git(repo, "bisect", "bad", "main")
    git(repo, "bisect", "good", history.shas[0])
    git(repo, "bisect", "good", history.shas[10])
    (tmp_path / "by-hand.log").write_text(git(repo, "bisect", "log"))
    git(repo, "bisect", "reset")
    done = bisect("replay", str(tmp_path / "by-hand.log"), "--repo", str(repo), "--run", "bash test.sh",
                  "--format", "json", db=tmp_path / "b.db")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == history.shas[23]
    manual = [s for s in report["steps"] if s["purpose"] == "manual"]
    assert [(s["sha"], s["verdict"]) for s in manual] == [
        (history.shas[40], "bad"), (history.shas[0], "good"), (history.shas[10], "good")
    ]  # fmt: skip
    assert all("from by-hand.log line" in s["reason"] for s in manual)
    searched = {s["sha"] for s in report["steps"] if s["purpose"] == "search"}
    assert searched
    assert not searched & {history.shas[0], history.shas[10], history.shas[40]}
    assert all(history.shas.index(sha) > 10 for sha in searched)


def test_replaying_a_complete_log_says_its_endpoints_were_judged_by_hand_not_run(tmp_path: Path, history):
    repo = history.path
    git(repo, "bisect", "start")
    git(repo, "bisect", "bad", "main")
    answer = git(repo, "bisect", "good", history.shas[0])
    while "is the first bad commit" not in answer:  # git's own search, to the end
        position = history.shas.index(git(repo, "rev-parse", "HEAD").strip())
        answer = git(repo, "bisect", "good" if position < 23 else "bad")
    (tmp_path / "complete.log").write_text(git(repo, "bisect", "log"))
    git(repo, "bisect", "reset")
    done = bisect("replay", str(tmp_path / "complete.log"), "--repo", str(repo), "--run", "bash test.sh",
                  "--no-explain", db=tmp_path / "b.db")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "0 search step(s)" in " ".join(done.stdout.split())
    lines = [" ".join(line.strip("│ ").split()) for line in done.stdout.splitlines()]
    assert "the good endpoint and the bad endpoint not run: judged by hand (`bisect mark`, or the log" in " ".join(
        lines
    )
    assert not any("run only because" in line for line in lines), done.stdout
    shown = json.loads(bisect("show", "1", "--format", "json", db=tmp_path / "b.db").stdout)
    assert shown["endpoints"] == {"good": "marked", "bad": "marked"}


def test_a_log_naming_an_unknown_revision_stores_nothing(tmp_path: Path, history):
    log = tmp_path / "typo.log"
    good, bad = history.shas[0], "0123abcd"
    lines = [f"git bisect start main {good}", f"git bisect good {history.shas[10]}", f"git bisect bad {bad}"]
    log.write_text("\n".join(lines) + "\n")
    done = bisect("replay", str(log), "--repo", str(history.path), "--run", "bash test.sh", db=tmp_path / "b.db")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"bisect: error: unknown revision '0123abcd' in {history.path}"]
    assert not (tmp_path / "b.db").exists()  # checked before the store was even opened


def test_mark_on_a_finished_bisect_agrees_or_reopens_it_for_resume(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history), db=db).returncode == 0
    agrees = bisect("mark", "1", history.shas[30], "bad", "--note", "saw it myself", db=db)
    assert agrees.returncode == 0, agrees.stderr
    assert "agrees with the answer" in agrees.stdout
    reopened = bisect("mark", "1", history.shas[22], "bad", "--by", "alice", "--note", "the plot dips here", db=db)
    assert reopened.returncode == 0
    assert "changes the answer" in reopened.stdout
    assert "bisect resume 1" in reopened.stdout
    status = bisect("status", "1", db=db).stdout
    assert status.startswith("bisect 1: running\n")
    assert "reopened" in status
    resumed = bisect("resume", "1", "--format", "json", db=db)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["first_bad"]["sha"] == history.shas[22]  # a person's verdict stands over the test's
    notes = [s["reason"] for s in report["steps"] if s["purpose"] == "manual"]
    assert notes == [f"marked bad by {getpass.getuser()}: saw it myself", "marked bad by alice: the plot dips here"]
    text = bisect("report", "1", db=db).stdout
    assert "marked bad by alice: the plot dips here" in text


def test_a_local_mark_names_its_step_as_the_report_numbers_it_in_a_store_of_several_bisects(tmp_path: Path, history):
    db = tmp_path / "b.db"
    for _ in range(2):  # the second bisect's steps are not the store's first
        assert bisect(*start_args(history, "--no-explain"), db=db).returncode == 0
    marked = bisect("mark", "2", history.shas[30], "bad", db=db)
    assert marked.returncode == 0, marked.stderr
    steps = json.loads(bisect("report", "2", "--format", "json", db=db).stdout)["steps"]
    [number] = [i for i, s in enumerate(steps, 1) if s["purpose"] == "manual"]
    assert stored_rows(db, "select max(id) from steps") != [(number,)]  # the store's id is another number
    assert marked.stdout == (
        f"bisect 2: {history.shas[30][:12]} marked bad (step {number}); stored; it agrees with the answer of bisect 2\n"
    )


def test_a_confirmation_words_a_verdict_given_by_hand_as_such_not_as_a_thousand_runs(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history, "--confirm", "--no-explain"), db=db).returncode == 0
    # The test says commit 23 is bad; a person says good: the boundary moves to 24, whose parent is theirs.
    assert "changes the answer" in bisect("mark", "1", history.shas[23], "good", db=db).stdout
    resumed = bisect("resume", "1", "--format", "json", db=db)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["first_bad"]["sha"] == history.shas[24]
    runs_at_23 = [s["verdict"] for s in report["steps"] if s["sha"] == history.shas[23] and s["purpose"] != "manual"]
    assert set(runs_at_23) == {"bad"}
    words = f"last good marked good by hand (its runs: 0 good/{len(runs_at_23)} bad), first bad 0 good/"
    assert words in report["message"]
    status = bisect("status", "1", db=db).stdout
    text = " ".join(bisect("report", "1", db=db).stdout.replace("│", " ").split())
    for shown in (report["message"], status, text):
        assert "1000" not in shown
    assert words in text


def test_a_running_coordinator_takes_in_a_mark(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 40, 23)
    db = tmp_path / "b.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_DB": str(db)}
    args = start_args(history, "--run", "sleep 3; bash test.sh", "--format", "json")
    with subprocess.Popen(
        [sys.executable, "-m", "bisector", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as coordinator:
        while bisect("status", "1", db=db).returncode != 0:  # until the bisect is stored
            assert coordinator.poll() is None
            time.sleep(0.2)
        # Commit 26 is bad, but a person says good: the search must believe it (27 becomes the first bad).
        marked = bisect("mark", "1", history.shas[26], "good", db=db)
        assert marked.returncode == 0, marked.stderr
        assert "takes the verdict in" in marked.stdout
        out, err = coordinator.communicate(timeout=300)
    report = json.loads(out)
    assert report["first_bad"]["sha"] == history.shas[27], err
    assert [s["sha"] for s in report["steps"] if s["purpose"] == "manual"] == [history.shas[26]]


def test_status_of_a_running_bisect_without_verdicts_names_the_whole_range(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 40, 23)
    db = tmp_path / "b.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_DB": str(db)}
    release = tmp_path / "release"  # the steps wait for it: the status is read while the first probe runs
    wait = f"while [ ! -e {release} ]; do sleep 0.1; done; bash test.sh"
    args = start_args(history, "--run", wait, "--no-explain")
    with subprocess.Popen(
        [sys.executable, "-m", "bisector", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as coordinator:
        status = ""
        while "progress: 0 search step(s) done, 1 running" not in status:  # the first probe runs; lazy endpoints
            assert coordinator.poll() is None
            status = bisect("status", "1", db=db).stdout
            time.sleep(0.2)
        release.touch()
        coordinator.wait(timeout=300)
    assert "checking the endpoints" not in status
    assert (
        f"; the first bad commit is one of 40 after {history.shas[0][:12]} up to {history.shas[40][:12]}, if the "
        "endpoints hold\n" in status
    )


def test_mark_refuses_a_commit_outside_the_range_and_an_unknown_term(tmp_path: Path, history):
    db = tmp_path / "b.db"
    args = start_args(history, "--term-old", "fast", "--term-new", "slow")
    args[args.index("--good") + 1] = history.shas[5]  # --good is given once
    assert bisect(*args, db=db).returncode == 0
    outside = bisect("mark", "1", history.shas[2], "slow", db=db)
    assert outside.returncode == 2
    assert f"{history.shas[2][:12]} is not a candidate of bisect 1" in outside.stderr
    unknown = bisect("mark", "1", history.shas[8], "sideways", db=db)
    assert unknown.returncode == 2
    assert "unknown verdict 'sideways': say fast, slow or skip" in unknown.stderr
    assert [s["purpose"] for s in json.loads(bisect("report", "1", "--format", "json", db=db).stdout)["steps"]].count(
        "manual"
    ) == 0


def test_db_takes_a_plain_path_and_a_read_only_store_serves_readers(tmp_path: Path, history):
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    done = bisect(*start_args(history), "--db", "bisect.db", cwd=store_dir)
    assert done.returncode == 0, done.stderr
    assert (store_dir / "bisect.db").is_file()
    for extra in store_dir.glob("bisect.db-*"):
        extra.unlink()  # a clean shutdown leaves none; the WAL files would need a writable directory
    for path in (store_dir / "bisect.db", store_dir):
        path.chmod(0o555 if path.is_dir() else 0o444)
    before = hashlib.sha256((store_dir / "bisect.db").read_bytes()).hexdigest()
    # root writes through file modes: drop that capability so the modes hold, as for any other user
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"] if os.geteuid() == 0 else []
    if drop and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only file cannot be made")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_DB": str(store_dir / "bisect.db")}

    def reader(*args: str) -> subprocess.CompletedProcess[str]:
        command = [*drop, sys.executable, "-m", "bisector", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    try:
        for args in (["list"], ["report", "1"], ["status", "1"], ["log", "1"], ["report", "1", "--format", "json"]):
            done = reader(*args)
            assert done.returncode == 0, (args, done.stderr)
        assert history.shas[23] in reader("report", "1").stdout
        refused = reader("mark", "1", history.shas[30], "bad")
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert hashlib.sha256((store_dir / "bisect.db").read_bytes()).hexdigest() == before
        assert sorted(p.name for p in store_dir.iterdir()) == ["bisect.db"]
    finally:
        store_dir.chmod(0o755)


def test_status_is_short_and_report_is_whole(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history), db=db).returncode == 0
    status = bisect("status", "1", db=db).stdout.splitlines()
    assert status[0] == "bisect 1: found"
    assert status[3] == f"answer: first bad commit: {history.shas[23][:12]} change 23 (#2023)"
    assert status[-1] == "the whole report: bisect report 1"
    assert len(status) <= 12
    report = bisect("report", "1", db=db).stdout
    assert report.index("first bad commit") < report.index("evidence") < report.index("commits in range (oldest")
    assert "(#2023) (PR #2023)" not in report
    assert "(#2023)  (PR" not in report


def test_show_numbers_the_steps_as_the_report_does(tmp_path: Path, history):
    db = tmp_path / "b.db"
    for _ in range(2):  # the second bisect's store ids start after the first's
        assert bisect(*start_args(history, "--no-explain"), db=db).returncode == 0
    report = json.loads(bisect("report", "2", "--format", "json", db=db).stdout)
    assert report["steps"][0]["id"] != 1
    shown = bisect("show", "2", "--tail", "1", db=db).stdout
    for step in report["steps"]:
        assert f"step {step['number']}: {step['sha'][:12]} {step['verdict']}" in shown
    assert f"step {report['steps'][-1]['id']}:" not in shown


def test_a_step_outside_the_candidates_has_no_position_in_the_step_tables(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history, "--no-explain"), db=db).returncode == 0
    (history.path / "after.txt").write_text("a commit after the range\n")
    git(history.path, "add", "after.txt")
    git(history.path, "commit", "-qm", "after the range")
    outside = git(history.path, "rev-parse", "HEAD").strip()
    assert bisect("rerun", "1", outside, db=db).returncode == 0
    step = json.loads(bisect("report", "1", "--format", "json", db=db).stdout)["steps"][-1]
    assert (step["purpose"], step["sha"], step["position"]) == ("rerun", outside, -1)
    row = next(line for line in bisect("report", "1", db=db).stdout.splitlines() if outside[:12] in line)
    assert " -1 " not in row
    assert "│ rerun   │ -   │" in row
    assert f"| rerun | - | `{outside[:12]}` |" in bisect("report", "1", "--format", "markdown", db=db).stdout


def test_the_commits_table_counts_the_commits_it_leaves_out(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history, "--no-explain"), db=db).returncode == 0
    text = bisect("report", "1", db=db).stdout
    markdown = bisect("report", "1", "--format", "markdown", db=db).stdout
    # This fixture's search leaves out one commit between two tested ones, and more elsewhere.
    assert not re.search(r"(?<![0-9])1 untested commits", text + markdown)
    assert re.search(r"│ 1 untested commit +│", text), text
    assert "| ... | | | 1 untested commit |" in markdown
    assert re.search(r"│ [0-9]{2} untested commits +│", text), text


def test_failed_endpoint_is_what_the_report_reproduces(tmp_path: Path):
    history = write_history(tmp_path / "repo", ["buildfail"] + ["good"] * 5 + ["bad"] * 5)
    db = tmp_path / "b.db"
    args = ["start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main",
            "--run", "bash test.sh", "--build", "bash build.sh", "--verify-endpoints", "first"]  # fmt: skip
    done = bisect(*args, "--format", "json", db=db)
    assert done.returncode == 3
    report = json.loads(done.stdout)
    assert report["reproduce_target"] == {"sha": history.shas[0], "why": "the good endpoint, which tested skip"}
    text = bisect("report", "1", db=db).stdout
    failed = next(s for s in report["steps"] if s["verdict"] == "skip")
    assert f"(skip): {failed['reason']}" in text
    assert f"log (step id {failed['id']}): {failed['log_path']}" in text
    assert f"reproduce {history.shas[0][:12]}, the good endpoint, which tested skip, by hand:" in text
    markdown = bisect("report", "1", "--format", "markdown", db=db).stdout
    assert f"log (step id {failed['id']}) `{failed['log_path']}`" in markdown
    assert failed["reason"] in markdown
    assert f"Reproduce `{history.shas[0][:12]}`, the good endpoint, which tested skip, by hand:" in markdown


def test_worktrees_ls_and_prune(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history, "--workers", "2"), db=db).returncode == 0
    listing = bisect("worktrees", "ls", "--repo", str(history.path)).stdout.splitlines()
    assert len(listing) == 2
    assert all("  idle  " in line and str(history.path) in line for line in listing)
    assert len(git(history.path, "worktree", "list").splitlines()) == 3
    pruned = bisect("worktrees", "prune")
    assert pruned.stdout.startswith("removed 2 worktree(s)"), pruned.stderr
    assert bisect("worktrees", "ls").stdout.strip() == "no worktrees"
    assert len(git(history.path, "worktree", "list").splitlines()) == 1
    assert bisect(*start_args(history), db=db).returncode == 0  # they are made again when needed


def test_worktrees_of_a_path_that_does_not_exist_are_refused_unless_some_are_kept(tmp_path: Path, history):
    """A mistyped --repo is one line and exit 2, for ls and prune; a deleted repository's worktrees stay prunable."""
    typo = tmp_path / "no-such-repo"
    for command in ("ls", "prune"):
        done = bisect("worktrees", command, "--repo", str(typo))
        assert (done.returncode, done.stdout, done.stderr) == (
            2, "", f"bisect: error: --repo {typo}: no such folder, and no worktrees are kept for it\n"
        )  # fmt: skip
    assert bisect(*start_args(history), db=tmp_path / "b.db").returncode == 0
    shutil.rmtree(history.path)
    pruned = bisect("worktrees", "prune", "--repo", str(history.path))
    assert pruned.stdout.startswith("removed 1 worktree(s)"), pruned.stderr


def test_the_man_page_lists_every_command_and_docs_holds_the_current_one():
    page = render_man(main, "dev")
    for name, _command in iter_commands(main):
        escaped = name.replace("-", "\\-")  # roff escapes hyphens
        assert f".SS {escaped}" in page, name
    assert {"bisect log", "bisect replay", "bisect mark", "bisect worktrees prune", "bisect man"} <= {
        name for name, _ in iter_commands(main)
    }
    written = (ROOT / "docs" / "bisect.1").read_text().splitlines()
    assert written[1:] == page.splitlines()[1:], "docs/bisect.1 is stale: run `bisect man --output docs/bisect.1`"


def test_explain_takes_the_verify_m(tmp_path: Path):
    assert bisect("demo", "init", str(tmp_path / "demo"), "--commits", "30").returncode == 0
    culprit = git(tmp_path / "demo", "log", "--format=%H", "--grep=batch-size dispatch").split()[0]
    for m in ("4", "8"):
        done = bisect("explain", culprit, "--repo", str(tmp_path / "demo"), "--verify-m", m)
        assert done.returncode == 0, done.stderr
        assert f"verify m={m} path" in done.stdout
    assert "verify m=4 path" in bisect("explain", culprit, "--repo", str(tmp_path / "demo")).stdout


def test_shell_completion_as_the_readme_documents_it():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_BISECT_COMPLETE": "bash_complete"}
    for words, expected in (("bisect wor", "plain,worktrees"), ("bisect start --term-o", "plain,--term-old")):
        done = subprocess.run(
            [sys.executable, "-m", "bisector"], env={**env, "COMP_WORDS": words, "COMP_CWORD": "1" if
            words.count(" ") == 1 else "2"}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.stdout.split() == [expected]
    readme = (ROOT / "README.md").read_text()
    assert 'eval "$(_BISECT_COMPLETE=bash_source bisect)"' in readme


def test_find_fix_uses_the_terms_broken_and_fixed_and_git_replays_its_log(tmp_path: Path):
    history = write_history(tmp_path / "repo", ["bad"] * 9 + ["good"] * 8)
    db = tmp_path / "b.db"
    args = ["start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main", "--run", "bash test.sh"]
    done = bisect(*args, "--find-fix", "--format", "json", db=db)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["terms"] == {"old": "broken", "new": "fixed"}
    assert report["first_bad"]["sha"] == history.shas[9]
    assert report["message"].startswith(f"first fixed commit: {history.shas[9][:12]}")
    assert {(s["verdict"], s["term"]) for s in report["steps"]} == {("bad", "broken"), ("good", "fixed")}
    assert f"first fixed commit: {history.shas[9]}" in bisect("report", "1", db=db).stdout
    log = bisect("log", "1", db=db).stdout
    assert log.startswith("git bisect start '--term-old' 'broken' '--term-new' 'fixed'\n")
    assert f"# first fixed commit: [{history.shas[9]}]" in git_replay(history.path, log, tmp_path)
    # a person's "good" is the test's outcome: here the fixed state, so commit 8 marked good moves the answer
    marked = bisect("mark", "1", history.shas[8], "good", db=db)
    assert "changes the answer" in marked.stdout, marked.stderr


def test_find_fix_names_its_endpoints_by_their_roles(tmp_path: Path):
    history = write_history(tmp_path / "repo", ["good"] * 12)  # nothing to find: every commit is fixed already
    db = tmp_path / "b.db"
    args = ["start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main", "--run", "bash test.sh"]
    done = bisect(*args, "--find-fix", "--no-explain", db=db)
    assert done.returncode == 3, done.stderr
    text = " ".join(done.stdout.split())
    assert f"the broken endpoint {history.shas[0][:12]} tested fixed (exit code 0)" in text
    assert "the fixed endpoint taken as given, not run" in text
    assert "the broken endpoint run only because the answer rested on it" in text


def test_a_boundary_given_by_hand_needs_no_endless_confirmation(tmp_path: Path, history):
    """--repeat 2 confirms the boundary; a person's verdicts on both sides of it settle the confirmation."""
    (tmp_path / "hand.log").write_text(
        f"git bisect start\ngit bisect bad {history.shas[40]}\ngit bisect good {history.shas[0]}\n"
        f"git bisect good {history.shas[22]}\ngit bisect bad {history.shas[23]}\n"
    )
    done = bisect("replay", str(tmp_path / "hand.log"), "--repo", str(history.path), "--run", "bash test.sh",
                  "--repeat", "2", "--format", "json", db=tmp_path / "b.db")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == history.shas[23]
    assert report["confirmation"]["status"] == "confirmed"
    assert report["search_steps"] == 0


def test_a_log_whose_bad_marks_came_back_out_of_order_still_replays_to_the_first_bad_commit(tmp_path: Path, history):
    """Parallel workers can find commit 24 bad after commit 23: git keeps one bad ref, which each bad mark moves,
    so the log lists bad marks newest first."""
    from datetime import UTC, datetime, timedelta

    from bisector.db.store import NewStep, Store
    from bisector.runner.config import build_spec
    from bisector.runner.coordinator import prepare_bisect
    from bisector.vocab.domain import BisectStatus, StepResult, Verdict

    db = tmp_path / "b.db"
    spec = build_spec(history.path, {"good": history.shas[0], "bad": "main", "run": "bash test.sh"})
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    order = [(0, Verdict.GOOD), (40, Verdict.BAD), (22, Verdict.GOOD), (23, Verdict.BAD), (24, Verdict.BAD)]
    with Store.open(f"sqlite:///{db}") as store:
        bisect_id = prepare_bisect(store, spec)
        ids = store.start_steps(bisect_id, [NewStep(history.shas[p], 1, "w", t0) for p, _ in order])
        store.finish_steps([
            (step_id, StepResult(step_id, history.shas[p], verdict), t0 + timedelta(seconds=i))
            for i, (step_id, (p, verdict)) in enumerate(zip(ids, order, strict=True))
        ])  # fmt: skip
        store.set_status(bisect_id, BisectStatus.FOUND, first_bad=history.shas[23], last_good=history.shas[22])
    log = bisect("log", str(bisect_id), db=db).stdout
    bad_marks = [line.split()[-1] for line in log.splitlines() if line.startswith("git bisect bad")]
    assert bad_marks == [history.shas[40], history.shas[24], history.shas[23]]
    assert f"# first bad commit: [{history.shas[23]}]" in git_replay(history.path, log, tmp_path)
