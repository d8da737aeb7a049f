"""The metric comes from the step's own output, wherever it is printed, or its worktree, in bounded memory and time."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from synthetic import culprit_history
from worker_steps import run_one, step_request

from bisector.vocab.domain import Verdict
from bisector.vocab.errors import InputError
from bisector.vocab.metric import DEFAULT_INFRA_PATTERNS, Expectation, MetricSpec, judge_run
from bisector.vocab.metric_scan import METRIC_SCAN_MAX_CHARS, MetricScan
from bisector.workers.local import LocalExecutor
from bisector.workers.output import LOG_CAP_BYTES
from bisector.workers.process import run_shell

AT_LEAST_4 = Expectation.parse(">= 4")
BACKTRACKING = r"((?:a|aa)+)!"  # exponential on a line of a's without a '!'
A_LINES = "yes $(printf 'a%.0s' $(seq 60)) | head -n 2000; exit 1"
PRINT_8_MIB = "yes 'more output a test prints after its metric' | head -c 8388608"
TRAINING_LOG_LINE = "step 1234 loss 0.5 lr 0.0001 grad norm 1.25 time 12.34 ms"  # a metric on every line


def test_the_metric_comes_from_the_steps_own_output_not_from_its_log_file(tmp_path: Path):
    """Another process writing the step's log path (a second bisect whose ids collide) cannot change the metric."""
    history = culprit_history(tmp_path / "repo", 2, 1)
    log = tmp_path / "logs" / "step-1.log"
    overwrite = f"{{ head -c 4096 /dev/zero | tr '\\0' '#'; echo; echo 'accept length: 9.0'; }} > {log}"
    run = f"echo 'accept length: 1.0'; {overwrite}"
    metric = MetricSpec(regex=r"accept length: ([0-9.]+)", expect=AT_LEAST_4)
    with LocalExecutor(str(history.path), workers=1) as executor:
        result = run_one(executor, step_request(history, 1, 0, run, tmp_path / "logs", metric=metric))
    assert (result.verdict, result.samples) == (Verdict.BAD, (1.0,)), result.detail


def test_a_backtracking_metric_regex_is_a_skip_that_says_so_not_a_hang(tmp_path: Path):
    """Matching gets what is left of the step's timeout (15 s here; the run takes milliseconds)."""
    history = culprit_history(tmp_path / "repo", 2, 1)
    metric = MetricSpec(regex=BACKTRACKING, expect=AT_LEAST_4)
    with LocalExecutor(str(history.path), workers=1) as executor:
        slow = run_one(executor, step_request(history, 1, 0, A_LINES, tmp_path / "logs", metric=metric, timeout_s=15))
        after = run_one(executor, step_request(history, 2, 0, "echo 'accept length: 5'", tmp_path / "logs"))
    assert slow.verdict is Verdict.SKIP, slow.detail
    assert "metric regex took longer than" in slow.detail
    assert after.verdict is Verdict.GOOD  # the worker serves on


def test_a_backtracking_infrastructure_pattern_is_a_skip_too(tmp_path: Path):
    metric = MetricSpec(
        regex=r"accept length: ([0-9.]+)", expect=AT_LEAST_4, infra_patterns=(*DEFAULT_INFRA_PATTERNS, BACKTRACKING)
    )
    output = subprocess.run(["bash", "-c", A_LINES], capture_output=True, text=True, check=False).stdout
    judgement = judge_run(metric, 1, output, tmp_path, time_limit_s=1.0)
    assert judgement.verdict is Verdict.SKIP
    assert judgement.detail.startswith("metric regex took longer than 1 s on the output")


@pytest.mark.parametrize("target", ["/tmp/results.json", "../results.json", "out/../../results.json"])
def test_a_metric_file_outside_the_worktree_is_refused(target: str):
    with pytest.raises(InputError, match="inside the worktree"):
        MetricSpec(json_file=target, json_key="value", expect=AT_LEAST_4)


def test_a_metric_file_that_links_out_of_the_worktree_is_not_read(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    outside = tmp_path / "shared-results.json"
    outside.write_text('{"value": 9.0}')  # what another bisect's step wrote
    metric = MetricSpec(json_file="results.json", json_key="value", expect=AT_LEAST_4)
    inside = "echo '{\"value\": 1.0}' > results.json"
    with LocalExecutor(str(history.path), workers=1) as executor:
        own = run_one(executor, step_request(history, 1, 0, inside, tmp_path / "logs", metric=metric))
        linked = run_one(executor, step_request(history, 2, 0, f"ln -s {outside} results.json", tmp_path / "logs",
                                                metric=metric))  # fmt: skip
    assert (own.verdict, own.samples) == (Verdict.BAD, (1.0,))
    assert linked.verdict is Verdict.SKIP
    assert "leads out of the worktree" in linked.detail


def test_a_metric_followed_by_8_mib_of_output_gets_its_verdict_and_the_last_one_printed_wins(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    metric = MetricSpec(regex=r"accept length: ([0-9.]+)", expect=AT_LEAST_4)
    once = f"echo 'accept length: 5.0'; {PRINT_8_MIB}"
    twice = f"echo 'accept length: 5.0'; {PRINT_8_MIB}; echo 'accept length: 3.5'; {PRINT_8_MIB}"
    with LocalExecutor(str(history.path), workers=1) as executor:
        first = run_one(executor, step_request(history, 1, 0, once, tmp_path / "logs", metric=metric))
        last = run_one(executor, step_request(history, 2, 0, twice, tmp_path / "logs", metric=metric))
    assert (first.verdict, first.samples) == (Verdict.GOOD, (5.0,)), first.detail
    assert (last.verdict, last.samples) == (Verdict.BAD, (5.0, 3.5)), last.detail


def test_the_metric_scan_of_a_run_holds_a_bounded_part_of_its_output(tmp_path: Path):
    scan = MetricScan(r"accept length: ([0-9.]+)")
    with (tmp_path / "run.log").open("ab") as log:
        run = run_shell(f"echo 'accept length: 5.0'; {PRINT_8_MIB}", tmp_path, {}, log, 120, metric_scan=scan)
    scan.finish()
    assert run.output.total_bytes > 8 << 20
    assert scan.values == (5.0,)
    assert scan.peak_held_chars <= METRIC_SCAN_MAX_CHARS


def test_a_metric_on_every_line_of_much_output_is_scanned_to_the_last_line(tmp_path: Path):
    """The time limit is each search's, not the run's: 192 MiB of matching lines take several times the limit in
    all, each search of about 3 MiB a small part of it."""
    scan = MetricScan(r"loss ([0-9.]+)", time_limit_s=1.0)
    run_cmd = f"yes '{TRAINING_LOG_LINE}' | head -c {192 << 20}; echo 'loss 0.01'"
    with (tmp_path / "run.log").open("ab") as log:
        run_shell(run_cmd, tmp_path, {}, log, 600, metric_scan=scan)
    scan.finish()
    assert not scan.timed_out
    assert scan.values[-1] == 0.01


@pytest.mark.slow
def test_a_metric_printed_after_2_gib_of_lines_that_match_too_gets_its_verdict(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    metric = MetricSpec(regex=r"loss ([0-9.]+)", expect=Expectation.parse("<= 0.1"))
    run_cmd = f"yes '{TRAINING_LOG_LINE}' | head -c {2 << 30}; echo 'loss 0.01'"
    with LocalExecutor(str(history.path), workers=1) as executor:
        result = run_one(executor, step_request(history, 1, 0, run_cmd, tmp_path / "logs", metric=metric,
                                                timeout_s=600))  # fmt: skip
    assert (result.verdict, result.samples[-1]) == (Verdict.GOOD, 0.01), result.detail
    assert (tmp_path / "logs" / "step-1.log").stat().st_size <= LOG_CAP_BYTES
