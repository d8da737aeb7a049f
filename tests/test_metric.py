from __future__ import annotations

from pathlib import Path

import pytest

from bisector.vocab.domain import ErrorKind, Verdict, parse_pr_number
from bisector.vocab.errors import InputError
from bisector.vocab.metric import Direction, Expectation, MetricSpec, NoMetricPolicy, judge_run

ACCEPT = MetricSpec(regex=r"accept length: ([0-9.]+)", expect=Expectation.parse(">= 4.0"))
EXIT_ONLY = MetricSpec()


@pytest.mark.parametrize(
    ("text", "op", "threshold", "direction"),
    [
        (">= 4.0", ">=", 4.0, Direction.HIGHER),
        ("<51", "<", 51.0, Direction.LOWER),
        (" <= -1e-3 ", "<=", -0.001, Direction.LOWER),
    ],
)
def test_expectation_parses(text, op, threshold, direction):
    expectation = Expectation.parse(text)
    assert (expectation.op, expectation.threshold, expectation.direction) == (op, threshold, direction)


@pytest.mark.parametrize("text", ["4.0", ">= ", "=> 4", "== 4", ">= four", ""])
def test_expectation_rejects_garbage(text):
    with pytest.raises(InputError, match="does not parse"):
        Expectation.parse(text)


def test_direction_matters():
    assert Expectation.parse(">= 4.0").is_met(4.0)
    assert not Expectation.parse(">= 4.0").is_met(3.46)
    assert Expectation.parse("< 51.0").is_met(50.9)
    assert not Expectation.parse("< 51.0").is_met(51.4)


def test_metric_regex_needs_exactly_one_group():
    with pytest.raises(InputError, match="exactly one group"):
        MetricSpec(regex="accept length: [0-9.]+", expect=Expectation.parse(">= 4"))
    with pytest.raises(InputError, match="not a valid regex"):
        MetricSpec(regex="accept (length", expect=Expectation.parse(">= 4"))


def test_metric_needs_expect_and_expect_needs_metric():
    with pytest.raises(InputError, match="needs --expect"):
        MetricSpec(regex="x: (\\d+)")
    with pytest.raises(InputError, match="needs a metric"):
        MetricSpec(expect=Expectation.parse(">= 4"))


@pytest.mark.parametrize(
    ("exit_code", "verdict", "kind"),
    [(0, Verdict.GOOD, None), (1, Verdict.BAD, None), (127, Verdict.BAD, None), (125, Verdict.SKIP, None),
     (128, Verdict.ERROR, ErrorKind.SIGNAL), (-9, Verdict.ERROR, ErrorKind.SIGNAL)],
)  # fmt: skip
def test_exit_code_decides_without_a_metric(tmp_path, exit_code, verdict, kind):
    judgement = judge_run(EXIT_ONLY, exit_code, "", tmp_path)
    assert (judgement.verdict, judgement.error_kind) == (verdict, kind)


def test_timeout_is_an_error_never_bad(tmp_path):
    judgement = judge_run(ACCEPT, 1, "accept length: 3.0", tmp_path, timed_out=True)
    assert (judgement.verdict, judgement.error_kind) == (Verdict.ERROR, ErrorKind.TIMEOUT)


@pytest.mark.parametrize(
    "log",
    ["RuntimeError: CUDA out of memory. Tried to allocate", "ConnectionRefusedError: [Errno 111] Connection refused",
     "Triton HIP 900: operation not permitted when stream is capturing"],
)  # fmt: skip
def test_infrastructure_signatures_are_errors(tmp_path, log):
    for spec in (ACCEPT, EXIT_ONLY):
        judgement = judge_run(spec, 1, f"starting\n{log}\n", tmp_path)
        assert (judgement.verdict, judgement.error_kind) == (Verdict.ERROR, ErrorKind.INFRA)


def test_signature_ignored_when_the_test_passed(tmp_path):
    judgement = judge_run(ACCEPT, 0, "warning: Connection refused once, retried\naccept length: 4.0", tmp_path)
    assert judgement.verdict is Verdict.GOOD


def test_metric_decides_even_when_the_test_exits_nonzero(tmp_path):
    judgement = judge_run(ACCEPT, 1, "accept length: 3.4595\nAssertionError: 3.4595 < 4.0", tmp_path)
    assert judgement.verdict is Verdict.BAD
    assert judgement.samples == (3.4595,)
    assert judge_run(ACCEPT, 0, "accept length: 4.0000", tmp_path).verdict is Verdict.GOOD


def test_missing_metric_skips_or_is_bad_by_policy(tmp_path):
    assert judge_run(ACCEPT, 1, "Traceback: boom", tmp_path).verdict is Verdict.SKIP
    bad_policy = MetricSpec(regex=ACCEPT.regex, expect=ACCEPT.expect, no_metric=NoMetricPolicy.BAD)
    assert judge_run(bad_policy, 1, "Traceback: boom", tmp_path).verdict is Verdict.BAD
    assert judge_run(ACCEPT, 125, "accept length: 3.0", tmp_path).verdict is Verdict.SKIP


def test_metric_from_json_file(tmp_path: Path):
    spec = MetricSpec(json_file="out/result.json", json_key="metrics.0.accept", expect=Expectation.parse(">= 4"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out/result.json").write_text('{"metrics": [{"accept": 3.5}]}')
    judgement = judge_run(spec, 0, "", tmp_path)
    assert (judgement.verdict, judgement.samples) == (Verdict.BAD, (3.5,))
    (tmp_path / "out/result.json").write_text("not json")
    assert judge_run(spec, 0, "", tmp_path).verdict is Verdict.SKIP


def test_a_run_that_failed_for_a_full_disk_is_a_disk_full_error(tmp_path: Path):
    judgement = judge_run(ACCEPT, 1, "write: /scratch/out.bin: No space left on device", tmp_path)
    assert (judgement.verdict, judgement.error_kind) == (Verdict.ERROR, ErrorKind.DISK_FULL)
    assert judgement.detail.startswith("disk full:")


def test_a_metric_file_larger_than_the_cap_is_not_read(tmp_path: Path):
    spec = MetricSpec(json_file="result.json", json_key="accept", expect=Expectation.parse(">= 4"))
    (tmp_path / "result.json").write_bytes(b'{"accept": 5.0, "pad": "' + b"x" * (17 << 20) + b'"}')
    judgement = judge_run(spec, 0, "", tmp_path)
    assert judgement.verdict is Verdict.SKIP
    assert "larger than 16 MiB" in judgement.detail


@pytest.mark.parametrize(
    ("subject", "pr"),
    [("[Perf] gemm: Tiny GEMM with batch-size dispatch (#47683)", 47683),
     ("Merge pull request #12 from dev/branch", 12), ("Fix #12 in the middle", None), ("plain", None)],
)  # fmt: skip
def test_pr_numbers_from_subjects(subject, pr):
    assert parse_pr_number(subject) == pr
