from __future__ import annotations

from pathlib import Path

import pytest

from bisector.vocab.domain import ErrorKind, Verdict, parse_pr_number
from bisector.vocab.errors import InputError
from bisector.vocab.metric import Direction, Expectation, MetricSpec, NoMetricPolicy, judge_run
from bisector.vocab.metric_scan import METRIC_LOOKAHEAD_CHARS, METRIC_SAMPLES_KEPT, METRIC_SCAN_MAX_CHARS, MetricScan

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


def scanned(pattern: str, output: bytes, chunk_bytes: int) -> MetricScan:
    scan = MetricScan(pattern)
    for start in range(0, len(output), chunk_bytes):
        scan.feed(output[start : start + chunk_bytes])
    scan.finish()
    return scan


FILLER_LINE = b"x" * 99 + b"\n"


def filler(size: int) -> bytes:
    return (FILLER_LINE * (size // len(FILLER_LINE) + 1))[:size]


def test_the_metric_is_found_before_any_amount_of_output_and_the_scan_stays_bounded():
    output = b"accept length: 4.5\n" + filler(8 << 20)
    scan = scanned(ACCEPT.regex or "", output, 64 << 10)
    assert scan.values == (4.5,)
    assert scan.peak_held_chars <= METRIC_SCAN_MAX_CHARS < len(output)
    judgement = judge_run(ACCEPT, 0, output[-1000:].decode(), Path("."), scan=scan)
    assert (judgement.verdict, judgement.samples) == (Verdict.GOOD, (4.5,))


def test_the_last_metric_printed_wins_across_the_stream():
    output = b"accept length: 5.0\n" + filler(3 << 20) + b"accept length: 3.25\n" + filler(3 << 20)
    scan = scanned(ACCEPT.regex or "", output, 64 << 10)
    assert scan.values == (5.0, 3.25)
    assert judge_run(ACCEPT, 0, "", Path("."), scan=scan).verdict is Verdict.BAD


# Matches placed across every boundary a scan has: where a search stops taking matches (a multiple of the lookahead
# from the start), where a chunk ends, where a UTF-8 character is split.
@pytest.mark.parametrize("offset", [-25, -19, -18, -17, -9, -3, -2, -1, 0, 1, 7])
@pytest.mark.parametrize("chunk_bytes", [64 << 10, 4093])
@pytest.mark.parametrize(
    ("pattern", "metric"),
    [(r"accept length: ([0-9.]+)", b"accept length: 4.125\n"),
     (r"^result:\s+([0-9.]+)$", b"\nresult:\n\n   4.125\n"),  # \s+ spans lines
     (r"^result:\s+([0-9.]+)$", b"zzresult: 7\nresult: 4.125\n"),  # not at a line start: no match
     (r"(?s)summary \u20ac.*?value=([0-9.]+)", "summary \u20ac\n\u20ac\u20ac\nvalue=4.125\n".encode())],
)  # fmt: skip
def test_a_match_across_a_scan_or_chunk_boundary_is_found_as_one_search_over_the_output_finds_it(
    offset: int, chunk_bytes: int, pattern: str, metric: bytes
):
    import regex

    for boundary in (METRIC_LOOKAHEAD_CHARS, 2 * METRIC_LOOKAHEAD_CHARS):
        output = filler(boundary + offset) + metric + b"accept length: 9\nresult: 9\n" + filler(2 * boundary)
        expected = [float(v) for v in regex.findall(pattern, output.decode(), flags=regex.MULTILINE)]
        assert 4.125 in expected
        assert list(scanned(pattern, output, chunk_bytes).values) == expected, (boundary, offset)


def test_a_run_keeps_its_last_metric_values():
    output = b"".join(b"accept length: %d\n" % n for n in range(3 * METRIC_SAMPLES_KEPT))
    scan = scanned(ACCEPT.regex or "", output, 4096)
    assert len(scan.values) == METRIC_SAMPLES_KEPT
    assert scan.values[-1] == 3 * METRIC_SAMPLES_KEPT - 1


@pytest.mark.parametrize(
    ("subject", "pr"),
    [("[Perf] gemm: Tiny GEMM with batch-size dispatch (#47683)", 47683),
     ("Merge pull request #12 from dev/branch", 12), ("Fix #12 in the middle", None), ("plain", None)],
)  # fmt: skip
def test_pr_numbers_from_subjects(subject, pr):
    assert parse_pr_number(subject) == pr
