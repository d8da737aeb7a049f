"""How a build ended (workers/build_outcome.py), judged from real commands' outcomes, and what a step makes of a
worktree build through a real StepRunner."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from synthetic import SyntheticHistory, culprit_history

from bisector.vocab.domain import ErrorKind, Verdict
from bisector.vocab.metric import DEFAULT_INFRA_PATTERNS, MetricSpec
from bisector.workers.build_outcome import BuildEnd, BuildOutcome, judge_build
from bisector.workers.executor import StepRequest
from bisector.workers.process import run_shell
from bisector.workers.step import StepRunner, WorkerSlot


def built(tmp_path: Path, command: str, *, timeout_s: float = 120.0, cancel: bool = False, log: str = "log",
          patterns: tuple[str, ...] = DEFAULT_INFRA_PATTERNS, time_limit_s: float = 30.0) -> BuildOutcome:  # fmt: skip
    with (tmp_path / log).open("ab", buffering=0) as file:
        process = run_shell(command, tmp_path, dict(os.environ), file, timeout_s, should_cancel=lambda: cancel)
    return judge_build(process, "image build", patterns, time_limit_s)


def test_exit_0_is_a_build_that_succeeded(tmp_path: Path):
    build = built(tmp_path, "echo compiled")
    assert (build.end, build.exit_code, build.error_kind, build.why) == (BuildEnd.SUCCEEDED, 0, None, "")


def test_an_exit_from_1_to_127_is_the_commits_failed_build_with_its_log_tail(tmp_path: Path):
    build = built(tmp_path, "echo 'lib.c:3: error: expected ;'; exit 3")
    assert (build.end, build.exit_code, build.error_kind) == (BuildEnd.FAILED, 3, None)
    assert build.why == "image build failed (exit 3)"
    assert build.detail() == "image build failed (exit 3)\n  | lib.c:3: error: expected ;"
    assert build.detail(tail_chars=5) == "image build failed (exit 3)\nted ;"


@pytest.mark.parametrize(("command", "code"), [("kill -9 $$", -9), ("exit 200", 200)])
def test_a_build_killed_by_a_signal_is_infrastructure(tmp_path: Path, command: str, code: int):
    build = built(tmp_path, f"echo half built; {command}")
    assert (build.end, build.exit_code, build.error_kind) == (BuildEnd.INFRA, code, ErrorKind.SIGNAL)
    assert build.detail() == f"image build died (exit {code})\n  | half built"


# Build tools whose own child is SIGKILLed (as the kernel's OOM killer ends the largest process): each exits 1 or 2
KILLED_CHILD = {
    "gcc": ({"a.c": "int f(void);\n", "die.sh": "#!/bin/sh\nkill -9 $$\n"}, "gcc -wrapper ./die.sh -c a.c"),
    "make": ({"Makefile": "all:\n\tsh -c 'kill -9 $$$$'\n"}, "make"),
    "bash": ({"build.sh": "sh -c 'kill -9 $$'\nexit 1\n"}, "bash build.sh"),
}


@pytest.mark.parametrize("tool", sorted(KILLED_CHILD))
def test_a_build_whose_tool_says_a_process_of_its_own_was_killed_is_infrastructure(tmp_path: Path, tool: str):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    files, command = KILLED_CHILD[tool]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    build = built(tmp_path, command, patterns=())  # found without the spec's patterns
    assert build.exit_code in (1, 2)
    assert (build.end, build.error_kind) == (BuildEnd.INFRA, ErrorKind.INFRA), build.detail()


def test_an_infrastructure_signature_in_a_failed_builds_output_is_infrastructure(tmp_path: Path):
    command = "echo 'pip: ConnectionRefusedError: [Errno 111] Connection refused' >&2; exit 1"
    build = built(tmp_path, command)
    assert (build.end, build.error_kind) == (BuildEnd.INFRA, ErrorKind.INFRA)
    assert build.why == "infrastructure: Connection refused"
    full = built(tmp_path, "echo 'cc1: No space left on device'; exit 1")
    assert (full.end, full.error_kind) == (BuildEnd.INFRA, ErrorKind.DISK_FULL)
    unsought = built(tmp_path, command, patterns=())  # the image builds look for none: the commit's failure
    assert (unsought.end, unsought.error_kind) == (BuildEnd.FAILED, None)


def test_a_signature_search_that_takes_too_long_finds_none(tmp_path: Path):
    backtracking = (r"^(a|aa)+$|a",)  # finds "a", after exponential backtracking on a long run of a's
    short = built(tmp_path, "printf 'aab'; exit 1", patterns=backtracking)
    assert (short.end, short.why) == (BuildEnd.INFRA, "infrastructure: a")
    long = built(tmp_path, f"printf '{'a' * 40}b'; exit 1", patterns=backtracking, time_limit_s=0.01)
    assert (long.end, long.error_kind) == (BuildEnd.FAILED, None)


def test_the_deadline_a_cancel_and_the_log_stop_a_build_before_its_exit_is_judged(tmp_path: Path):
    late = built(tmp_path, "sleep 60; exit 3", timeout_s=0.2)
    assert (late.end, late.error_kind, late.why) == (BuildEnd.TIMED_OUT, ErrorKind.TIMEOUT, "image build timed out")
    assert late.detail() == "image build timed out"
    cancelled = built(tmp_path, "sleep 60", cancel=True)
    assert (cancelled.end, cancelled.error_kind, cancelled.why) == (BuildEnd.CANCELLED, None, "cancelled")
    with Path("/dev/full").open("ab", buffering=0) as full:  # every write fails with ENOSPC
        process = run_shell("echo built; exit 0", tmp_path, dict(os.environ), full, 120.0)
    unlogged = judge_build(process, "build")
    assert (unlogged.end, unlogged.error_kind) == (BuildEnd.LOG_FAILED, None)  # the caller tells harness from disk
    assert unlogged.why.startswith("writing the step log: [Errno 28]")


def build_request(history: SyntheticHistory, tmp_path: Path, build_cmd: str, step_id: int) -> StepRequest:
    return StepRequest(
        step_id=step_id, bisect_id=1, sha=history.shas[0], attempt=1, repo=str(history.path), run_cmd="bash test.sh",
        build_cmd=build_cmd, metric=MetricSpec(), log_path=str(tmp_path / "logs" / f"step-{step_id}.log"),
        timeout_s=120.0,
    )  # fmt: skip


def test_a_worktree_build_is_a_skip_an_error_or_the_test(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 3, 2)
    runner = StepRunner(WorkerSlot("w0", (), tmp_path / "worktree"))
    failed = runner.run(build_request(history, tmp_path, "echo 'missing header'; exit 2", 1))
    assert (failed.verdict, failed.exit_code, failed.error_kind) == (Verdict.SKIP, 2, None)
    assert failed.detail == "build failed (exit 2)\n  | missing header"
    killed = runner.run(build_request(history, tmp_path, "kill -KILL $$", 2))
    assert (killed.verdict, killed.exit_code, killed.error_kind) == (Verdict.ERROR, -9, ErrorKind.SIGNAL)
    assert killed.detail.startswith("build died (exit -9)")
    refused = runner.run(build_request(history, tmp_path, "echo 'Connection refused'; exit 1", 3))
    assert (refused.verdict, refused.error_kind) == (Verdict.ERROR, ErrorKind.INFRA)
    assert refused.detail.startswith("infrastructure: Connection refused")
    tested = runner.run(build_request(history, tmp_path, "true", 4))
    assert tested.verdict is Verdict.GOOD, tested.detail


# The last lines of real runs: pip and requests on a host whose DNS cannot resolve the index or the model hub, and
# curl against a server that resets the connection.
NETWORK_FAILURES = {
    "pip": "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection "
    "broken by 'NameResolutionError(\"HTTPSConnection(host='pypi.invalid', port=443): Failed to resolve 'pypi.invalid' "
    "([Errno -2] Name or service not known)\")': /simple/tinypkgx/\n"
    "ERROR: Could not find a version that satisfies the requirement tinypkgx (from versions: none)\n"
    "ERROR: No matching distribution found for tinypkgx\n",
    "requests": "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.invalid', port=443): Max "
    'retries exceeded with url: /api/models/gpt2 (Caused by NameResolutionError("HTTPSConnection(host='
    "'huggingface.invalid', port=443): Failed to resolve 'huggingface.invalid' ([Errno -2] Name or service not "
    'known)"))\n',
    "curl": "curl: (56) Recv failure: Connection reset by peer\n",
}


@pytest.mark.parametrize("tool", sorted(NETWORK_FAILURES))
def test_a_network_failure_in_a_build_or_a_test_is_an_infrastructure_error(tmp_path: Path, tool: str) -> None:
    """A host that cannot resolve a name or whose connection is reset says nothing about the commit: never a skip of
    its build, never a bad test."""
    history = culprit_history(tmp_path / "repo", 3, 2)
    output = tmp_path / "output.txt"
    output.write_text(NETWORK_FAILURES[tool])
    runner = StepRunner(WorkerSlot("w0", (), tmp_path / "worktree"))
    build = runner.run(build_request(history, tmp_path, f"cat {output}; exit 1", 1))
    test = runner.run(replace(build_request(history, tmp_path, "", 2), run_cmd=f"cat {output}; exit 1"))
    for result in (build, test):
        assert (result.verdict, result.error_kind) == (Verdict.ERROR, ErrorKind.INFRA), result.detail


ASSERTIONS = """import socket

import pytest


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_reports_refusal():
    assert "Connection refused" in "connection failed"


def test_raises_on_refusal():
    with pytest.raises(ConnectionRefusedError):
        pass


def test_server():
    socket.create_connection(("127.0.0.1", closed_port())).close()
"""


@pytest.mark.parametrize(
    ("test", "verdict", "kind"),
    [("test_reports_refusal", Verdict.BAD, None), ("test_raises_on_refusal", Verdict.BAD, None),
     ("test_server", Verdict.ERROR, ErrorKind.INFRA)],
)  # fmt: skip
def test_a_failed_assertion_that_names_an_infrastructure_error_is_bad(
    tmp_path: Path, test: str, verdict: Verdict, kind: ErrorKind | None
) -> None:
    """pytest's report of a failed assertion quotes what the test expected (`assert "Connection refused" in ...`,
    `DID NOT RAISE ConnectionRefusedError`): the commit's failure. A refused connection the test met is
    infrastructure."""
    history = culprit_history(tmp_path / "repo", 3, 2)
    (tmp_path / "test_client.py").write_text(ASSERTIONS)
    run = f"{sys.executable} -m pytest -q -p no:cacheprovider --rootdir {tmp_path} {tmp_path}/test_client.py::{test}"
    result = StepRunner(WorkerSlot("w0", (), tmp_path / "worktree")).run(
        replace(build_request(history, tmp_path, "", 1), run_cmd=run)
    )
    assert (result.verdict, result.exit_code, result.error_kind) == (verdict, 1, kind), result.detail
