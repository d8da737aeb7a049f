"""The `bisect` command as a user runs it: real subprocesses, real repos, real SQLite files."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from bisect_helpers import stored_rows, wait_for
from synthetic import culprit_history

from bisector.cli import main

ROOT = Path(__file__).resolve().parents[1]


def bisect(*args: str, db: Path | None = None, timeout_s: float = 300, **kwargs) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if db is not None:
        env["BISECT_DB"] = f"sqlite:///{db}"
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args], capture_output=True, text=True, env=env, timeout=timeout_s, **kwargs
    )


@pytest.fixture
def history(tmp_path: Path):
    return culprit_history(tmp_path / "repo", 40, 23)


def start_args(history, *extra: str) -> list[str]:
    return [
        "start", "--repo", str(history.path), "--good", history.shas[0][:10], "--bad", "main",
        "--run", "bash test.sh", "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", *extra,
    ]  # fmt: skip


def test_start_prints_a_json_report(tmp_path: Path, history):
    done = bisect(*start_args(history, "--workers", "2", "--format", "json"), db=tmp_path / "b.db")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "found"
    assert report["first_bad"]["sha"] == history.shas[23]
    assert report["first_bad"]["subject"] == "change 23 (#2023)"
    assert report["first_bad"]["pr"] == 2023
    assert report["first_bad"]["metric"] == 5.0
    assert report["last_good"] == report["last_good"] | {"sha": history.shas[22], "metric": 10.0}
    assert report["candidates"] == 41
    assert {"sha", "verdict", "metric", "worker", "run_s"} <= set(report["steps"][0])
    assert report["reproduce"].startswith(f"git -C {history.path} worktree add")


def test_a_reader_that_stops_reading_the_output_never_stops_the_bisect(tmp_path: Path, history):
    """`bisect start ... 2>&1 | head -1`: the output's reader goes after one line; the bisect goes on to its answer."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_DB": f"sqlite:///{tmp_path / 'b.db'}"}
    args = [sys.executable, "-m", "bisector", *start_args(history, "--run", "sleep 0.2; bash test.sh")]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    assert process.stdout is not None
    assert process.stdout.readline().startswith(b"bisect 1: ")
    process.stdout.close()
    assert process.wait(timeout=300) == 141  # as a shell reports a command killed by SIGPIPE
    shown = bisect("show", "1", "--format", "json", db=tmp_path / "b.db")
    assert json.loads(shown.stdout)["status"] == "found", shown.stdout
    assert json.loads(shown.stdout)["first_bad"]["sha"] == history.shas[23]


def test_list_and_stats_find_a_repository_by_the_path_start_was_given(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history), db=db).returncode == 0
    for where, repo in ((history.path.parent, "repo"), (history.path, "."), (history.path, "./")):
        listed = bisect("list", "--repo", repo, "--format", "json", db=db, cwd=where)
        assert [b["id"] for b in json.loads(listed.stdout)] == [1], (where, repo, listed.stderr)
        stats = bisect("stats", "--repo", repo, "--format", "json", db=db, cwd=where)
        assert json.loads(stats.stdout), (where, repo, stats.stderr)


def test_markdown_and_text_reports_and_status(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history, "--format", "markdown"), db=db).stdout.startswith("### gpu-bisect #1: found")
    text = bisect("report", "1", db=db).stdout
    assert history.shas[23] in text
    assert (
        "or through gpu-bisect (its image, where the bisect used images):\n"
        f"  bisect run-at --bisect 1 {history.shas[23][:12]}" in text
    )
    assert "<- first bad" in text
    status = bisect("status", "1", db=db).stdout
    assert status.startswith("bisect 1: found\n")
    assert "<- first bad" not in status
    listing = bisect("list", db=db).stdout
    assert "found" in listing


def test_bisect_toml_supplies_keys_and_flags_win(tmp_path: Path, history):
    (history.path / "bisect.toml").write_text(
        f'[bisect]\ngood = "{history.shas[0]}"\nbad = "main"\nrun = "bash test.sh"\n'
        'metric = "metric: ([0-9.]+)"\nexpect = ">= 100"\nworkers = 2\n'
    )
    done = bisect("start", "--repo", str(history.path), "--expect", ">= 8", "--format", "json", db=tmp_path / "b.db")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == history.shas[23]
    assert report["spec"]["expect"] == ">= 8"
    assert report["spec"]["workers"] == 2


def test_endpoint_mismatch_exits_3_with_the_values(tmp_path: Path, history):
    done = bisect(*start_args(history, "--expect", ">= 20"), db=tmp_path / "b.db")
    assert done.returncode == 3
    assert "good endpoint" in done.stdout
    assert "metric 10" in done.stdout


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--good": "nosuchref"}, "unknown revision 'nosuchref'"),
        ({"--good": "main", "--bad": "HEAD~3"}, "is not an ancestor of bad"),
        ({"--good": "main", "--bad": "main"}, "empty range"),
        ({"--repo": "/nonexistent/repo"}, "not a git repository"),
        ({"--metric": "metric: [0-9.]+"}, "exactly one group"),
        ({"--expect": "at least 4"}, "does not parse"),
        ({"--workers": "0"}, "--workers must be between 1 and 256"),
        ({"--gpus-per-step": "2"}, "no GPU"),
        ({"--env": "NOEQUALS"}, "write KEY=VALUE"),
        ({"--expect": "auto", "--direction": "higher", "--repeat": "4"}, "give --repeat 5 or more"),
        ({"--images-max-size": "abc"}, "--images-max-size: 'abc' is not a size"),  # checked without --image too
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, history, change, message):
    args = start_args(history)
    for flag, value in change.items():
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    db = tmp_path / "b.db"
    done = bisect(*args, db=db)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    if db.exists():
        assert sqlite3.connect(db).execute("select count(*) from bisects").fetchone() == (0,)


def test_unwritable_database_is_one_line(history):
    done = subprocess.run(
        [sys.executable, "-m", "bisector", *start_args(history), "--db", "sqlite:////dev/null/nope/bisect.db"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "cannot open the store" in done.stderr


@pytest.mark.parametrize(
    "command",
    [["list"], ["stats"], ["status", "1"], ["report", "1"], ["log", "1"], ["step-logs", "ls"], ["logs", "ls"]],
)
def test_a_read_only_command_on_a_mistyped_store_is_one_line_and_makes_none(tmp_path: Path, command: list[str]):
    typo = tmp_path / "bisects.db"
    done = bisect(*command, db=typo)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        done.stderr
        == f"bisect: error: no store at {typo}: check --db / $BISECT_DB (the first `bisect start` makes one)\n"
    )
    assert not typo.exists()


def test_the_default_store_lists_empty_before_the_first_bisect(tmp_path: Path):
    """As text, one line that says so (`worktrees ls` and `step-logs ls` say theirs), not a bare header; as JSON,
    an empty list."""
    env = {k: v for k, v in os.environ.items() if k != "BISECT_DB"}
    for output_format, expected in (("table", "no bisects\n"), ("json", "[]\n")):
        listed = subprocess.run(
            [sys.executable, "-m", "bisector", "list", "--format", output_format], capture_output=True, text=True,
            timeout=300, env={**env, "PYTHONPATH": str(ROOT), "BISECT_DATA_DIR": str(tmp_path / "data")},
        )  # fmt: skip
        assert (listed.returncode, listed.stdout) == (0, expected), listed.stderr


def test_bad_input_never_loses_stored_bisects(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history), db=db).returncode == 0
    assert bisect(*start_args(history, "--expect", "nonsense"), db=db).returncode == 2
    assert bisect("resume", "1", db=db).returncode == 2
    assert bisect("status", "99", db=db).stderr.strip() == f"bisect: error: no bisect with id 99 in sqlite:///{db}"
    assert json.loads(bisect("report", "1", "--format", "json", db=db).stdout)["status"] == "found"


def test_resume_after_kill_9_does_not_rerun_finished_steps(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 300, 211, sleep_s=0.4)
    db = tmp_path / "b.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_DB": f"sqlite:///{db}"}
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "bisector", *start_args(history, "--workers", "2")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    finished = 0
    while finished < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
        if db.exists():
            try:
                finished = (
                    sqlite3.connect(db).execute("select count(*) from steps where verdict is not null").fetchone()[0]
                )
            except sqlite3.OperationalError:
                continue
    assert finished >= 4
    os.kill(coordinator.pid, signal.SIGKILL)
    coordinator.wait()
    before = sqlite3.connect(db).execute("select id, sha, verdict from steps order by id").fetchall()
    assert sqlite3.connect(db).execute("select status from bisects").fetchone() == ("running",)

    done = bisect("resume", "1", "--format", "json", db=db)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == history.shas[211]
    decided_before = {sha for _, sha, verdict in before if verdict in ("good", "bad")}
    rerun = [s for s in report["steps"] if s["id"] > before[-1][0] and s["sha"] in decided_before]
    assert rerun == []
    interrupted = [s for s in report["steps"] if s["error_kind"] == "interrupted"]
    assert len(interrupted) == sum(1 for _, _, verdict in before if verdict is None)
    os.killpg(coordinator.pid, signal.SIGKILL) if _group_alive(coordinator.pid) else None


def test_resume_no_explain_finds_the_culprit_and_skips_the_explanation(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 20, 13)
    db = tmp_path / "b.db"
    started, go = tmp_path / "started", tmp_path / "go"
    wait_then_test = f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; bash test.sh"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_DB": f"sqlite:///{db}"}
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "bisector", *start_args(history, "--run", wait_then_test, "--executor", "inprocess")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(coordinator.pid, signal.SIGKILL)  # the coordinator and its waiting step
    coordinator.wait()
    go.touch()
    done = bisect("resume", "1", "--no-explain", "--format", "json", db=db)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == history.shas[13]
    assert report["explanation"] is None
    assert "now explaining it" not in done.stderr


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cancel_stops_a_running_bisect(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 300, 100, sleep_s=2.0)
    db = tmp_path / "b.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_DB": f"sqlite:///{db}"}
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "bisector", *start_args(history)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: bool(stored_rows(db, "select id from steps where verdict is null")), what="a running step")
        assert bisect("cancel", "1", db=db).returncode == 0
        out, _ = coordinator.communicate(timeout=60)
    finally:
        coordinator.kill()
    assert coordinator.returncode == 3
    assert "cancelled" in out
    steps = sqlite3.connect(db).execute("select verdict, detail from steps").fetchall()
    assert all(verdict is not None for verdict, _ in steps)
    stopped = [detail for verdict, detail in steps if verdict == "cancelled"]
    assert stopped
    assert set(stopped) == {"the bisect was cancelled"}  # not "no longer needed": a person asked
    assert f"{len(stopped)} stopped early, the bisect was cancelled" in bisect("report", "1", db=db).stdout
    assert bisect("cancel", "1", db=db).returncode == 2


def process_state(pid: int) -> str:
    """The process's state as /proc/PID/stat gives it: R running, S sleeping in a wait a signal interrupts, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _sigint_by_default() -> None:
    # A command started with SIGINT ignored (inherited: a test runner's worker may ignore it, as may a job a shell
    # ran in the background) rightly keeps ignoring it: the command under test starts with the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("view", ["status", "report"])
def test_ctrl_c_in_a_read_only_command_stops_it_without_a_resume_hint(view: str):
    """`bisect status|report --server` waiting on a server that took the request and never answers, then SIGINT:
    one line and exit 130, no traceback and no `bisect resume` hint (the command ran nothing to continue)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(120)  # a safety net against a command that never connects
        command = subprocess.Popen(
            [sys.executable, "-m", "bisector", view, "1", "--server", f"http://127.0.0.1:{listener.getsockname()[1]}"],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_sigint_by_default,
        )  # fmt: skip
        try:
            connection, _ = listener.accept()
            with connection:
                assert connection.recv(65536).startswith(b"GET /api/bisects/1/rendered")
                # a signal that comes between the check for signals and the wait itself is seen only once the wait
                # times out: send it once the command sleeps in its wait for the answer
                wait_for(lambda: process_state(command.pid) == "S", what="the command to wait for the answer")
                command.send_signal(signal.SIGINT)
                out, err = command.communicate(timeout=60)
        finally:
            command.kill()
    assert (command.returncode, out, err) == (130, "", "bisect: interrupted\n")


def test_a_read_only_command_stops_waiting_on_a_server_that_never_answers():
    """`bisect status --server` (report's path too) on a server that took the request and never answers: one line
    naming the wait and exit 2 after VIEW_TIMEOUT_S, not the 120 s a submission may wait (in which a Ctrl-C caught
    just before the wait began would go unseen)."""
    from bisector.service.client import VIEW_TIMEOUT_S

    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(120)  # a safety net against a command that never connects
        server = f"http://127.0.0.1:{listener.getsockname()[1]}"
        command = subprocess.Popen(
            [sys.executable, "-m", "bisector", "status", "1", "--server", server],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            connection, _ = listener.accept()
            with connection:
                out, err = command.communicate(timeout=300)  # only against a hang
        finally:
            command.kill()
    assert (command.returncode, out) == (2, "")
    assert err == f"bisect: error: {server} took the request but gave no answer within {VIEW_TIMEOUT_S:g} s\n"


def test_cancel_stores_the_candidates_a_dead_coordinator_had_not(tmp_path: Path, history):
    """A bisect whose creation was cut short between its row and its candidates: cancelling it lists and stores
    them, so that its report still names every commit."""
    from bisector.db.store import Store
    from bisector.runner.config import build_spec
    from bisector.runner.coordinator import utc_now

    db = tmp_path / "b.db"
    spec = build_spec(history.path, {"good": history.shas[0], "bad": "main", "run": "bash test.sh"})
    with Store.open(f"sqlite:///{db}") as store:
        bisect_id = store.create_bisect(str(history.path), history.shas[0], history.shas[-1], spec.to_json(), utc_now())
        assert len(store.candidates(bisect_id)) == 0
    assert bisect("cancel", str(bisect_id), db=db).returncode == 0
    done = bisect("status", str(bisect_id), "--format", "json", db=db)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["status"], report["candidates"]) == ("cancelled", 41)


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        found.append((f"{prefix}{name}", command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix}{name} ")
    return found


def test_every_command_and_option_has_help():
    for name, command in _commands(main):
        assert command.help, f"`bisect {name}` has no help text"
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "help":
                assert param.help, f"`bisect {name} {param.opts[0]}` has no help text"


def test_run_at_any_commit_of_a_bisect(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history, "--no-explain"), db=db).returncode == 0
    before = json.loads(bisect("report", "1", "--format", "json", db=db).stdout)
    done = bisect("run-at", "--bisect", "1", history.shas[30][:10], "--repeat", "2", "--workers", "2", db=db)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2
    assert all(line.startswith(f"{history.shas[30][:12]}  bad  metric 5") for line in lines)
    after = json.loads(bisect("report", "1", "--format", "json", db=db).stdout)
    assert after["status"] == before["status"] == "found"
    assert [s["purpose"] for s in after["steps"]].count("rerun") == 2
    assert bisect("run-at", "--bisect", "1", "nosuchrev", db=db).returncode == 2
    assert before["rerun"] == f"bisect run-at --bisect 1 {history.shas[23][:12]}"  # the report's command, as printed
    again = bisect(*before["rerun"].split()[1:], "--format", "json", db=db)
    assert again.returncode == 0, again.stderr
    [run] = json.loads(again.stdout)
    assert (run["sha"], run["verdict"], run["metric"]) == (history.shas[23], "bad", 5.0)
    old_name = bisect("rerun", "1", history.shas[30][:10], "--times", "1", db=db)  # scripts keep working
    assert old_name.returncode == 0, old_name.stderr
    assert old_name.stdout.startswith(f"{history.shas[30][:12]}  bad  metric 5")
    steps = json.loads(bisect("report", "1", "--format", "json", db=db).stdout)["steps"]
    for args, says in (
        (("--run", "true"), "--run: with --bisect the run is that bisect's own build and test"),
        (("--repo", str(tmp_path)), "--repo: with --bisect"),
    ):
        refused = bisect("run-at", "--bisect", "1", history.shas[30], *args, db=db)
        assert refused.returncode == 2, refused.stderr
        assert says in refused.stderr
    for args, says in ((("--step", "1"), "--step N needs --bisect ID"), ((), "give REV")):
        refused = bisect("run-at", *args, db=db)
        assert refused.returncode == 2, refused.stderr
        assert says in refused.stderr
    assert json.loads(bisect("report", "1", "--format", "json", db=db).stdout)["steps"] == steps  # nothing stored


def test_run_at_step_repeats_a_stored_step_at_its_commit(tmp_path: Path, history):
    db = tmp_path / "b.db"
    assert bisect(*start_args(history, "--no-explain"), db=db).returncode == 0
    report = json.loads(bisect("report", "1", "--format", "json", db=db).stdout)
    step = report["steps"][-1]
    done = bisect("run-at", "--bisect", "1", "--step", str(step["number"]), db=db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{step['sha'][:12]}  {step['verdict']}")
    after = json.loads(bisect("report", "1", "--format", "json", db=db).stdout)
    assert after["steps"][-1]["sha"] == step["sha"]
    assert after["steps"][-1]["purpose"] == "rerun"
    for args in (("--step", "0"), ("--step", str(len(after["steps"]) + 1)), ()):
        refused = bisect("run-at", "--bisect", "1", *args, db=db)
        assert refused.returncode == 2, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    both = bisect("run-at", "--bisect", "1", step["sha"], "--step", "1", db=db)
    assert both.returncode == 2
    assert "one of them" in both.stderr
    assert json.loads(bisect("report", "1", "--format", "json", db=db).stdout)["steps"] == after["steps"]
