"""Reading CI results: JUnit XML in its common shapes, the metrics JSON, directories, bad input."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from triage_repo import FIXTURES

from bisector.triage.junit import MAX_TEXT_CHARS
from bisector.triage.model import Outcome
from bisector.triage.results import load_run
from bisector.vocab.errors import InputError
from bisector.vocab.metric import Direction


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_testsuites_root_with_several_suites_reruns_and_repeats():
    run = load_run(FIXTURES / "bad.xml")
    assert run.commit == "@COMMIT@"
    assert len(run.cases) == 15
    retried = run.cases["tests.test_serving::test_retry_passes"]
    assert (retried.outcome, retried.failed_attempts, retried.passed_on_retry) == (Outcome.PASSED, 1, True)
    assert retried.message == "AssertionError: 17 tokens out of order"
    twice = run.cases["tests.test_serving::test_twice"]  # failed in one suite, passed in the next
    assert (twice.outcome, twice.failed_attempts) == (Outcome.PASSED, 1)
    lost = run.cases["tests.test_serving::test_lost_runner"]
    assert lost.outcome is Outcome.ERROR
    assert "The runner has received a shutdown signal" in lost.text  # from <system-err>
    assert "decode m=1 -> simt" in run.cases["tests.test_serving::test_accept_length"].text  # <system-out>
    assert run.cases["tests.test_serving::test_skipped"].outcome is Outcome.SKIPPED
    assert run.cases["tests.test_kernels.TestGemm::test_small[8]"].classname == "tests.test_kernels.TestGemm"


def test_single_testsuite_root_with_surefire_flaky_elements(tmp_path: Path):
    xml = write(
        tmp_path / "surefire.xml",
        '<testsuite name="s" tests="2"><properties><property name="git_commit" value="abc123"/></properties>'
        '<testcase classname="com.example.GemmTest" name="small" file="src/GemmTest.java">'
        '<flakyFailure message="expected 1 got 2" type="java.lang.AssertionError"/></testcase>'
        '<testcase classname="com.example.GemmTest" name="large"><failure message="boom"/>'
        '<rerunFailure message="boom again"/></testcase></testsuite>',
    )
    run = load_run(xml)
    assert run.commit == "abc123"
    small = run.cases["com.example.GemmTest::small"]
    assert small.passed_on_retry
    assert small.file == "src/GemmTest.java"
    large = run.cases["com.example.GemmTest::large"]
    assert (large.outcome, large.failed_attempts, large.passed_on_retry) == (Outcome.FAILED, 1, False)
    assert large.message == "boom"


def test_a_case_failing_in_one_file_and_passing_in_the_next_passed_on_retry(tmp_path: Path):
    failed = (
        '<testsuite><testcase classname="tests.test_a" name="test_b"><failure message="boom"/></testcase></testsuite>'
    )
    passed = '<testsuite><testcase classname="tests.test_a" name="test_b"/></testsuite>'
    write(tmp_path / "run" / "1-first.xml", failed)
    write(tmp_path / "run" / "2-rerun.xml", passed)
    retried = load_run(tmp_path / "run").cases["tests.test_a::test_b"]
    assert (retried.outcome, retried.failed_attempts, retried.message) == (Outcome.PASSED, 1, "boom")


def test_metrics_json_thresholds_expectations_and_bands():
    run = load_run(FIXTURES / "bad_metrics.json")
    latency = run.metrics["decode_latency_ms"]
    assert (latency.value, latency.threshold, latency.direction) == (51.4, 51.0, Direction.LOWER)
    assert latency.noise_band == "1%"  # the file's default band
    assert not latency.passes()
    accept = run.metrics["accept_length"]
    assert (accept.threshold, accept.direction, accept.expect) == (4.0, Direction.HIGHER, ">= 4")


def test_a_directory_merges_xml_and_json_and_agrees_on_the_commit(tmp_path: Path):
    write(tmp_path / "run" / "junit.xml", (FIXTURES / "bad.xml").read_text().replace("@COMMIT@", "c0ffee"))
    write(tmp_path / "run" / "metrics.json", (FIXTURES / "bad_metrics.json").read_text().replace("@COMMIT@", "c0ffee"))
    write(tmp_path / "run" / "notes.txt", "ignored")
    run = load_run(tmp_path / "run")
    assert run.commit == "c0ffee"
    assert len(run.sources) == 2
    assert "throughput_tok_s" in run.metrics
    assert "tests.test_serving::test_oom" in run.cases


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("broken.xml", "<testsuite><testcase", "not readable JUnit XML"),
        ("mismatched.xml", '<testsuite><testcase name="a"><system-out>log</testcase></testsuite>', "mismatched tag"),
        ("text.xml", "<testsuite><testcase/></testsuite>trailing", "junk after document element"),
        ("other.xml", "<html><body/></html>", "the root element is <html>"),
        ("broken.json", "{", "not readable JSON"),
        ("flat.json", '{"latency": 51.4}', 'a metrics file is an object with a "metrics" object'),
        ("nothreshold.json", '{"metrics": {"latency": {"value": 51.4}}}', "threshold must be a finite number"),
        ("direction.json", '{"metrics": {"x": {"value": 1, "threshold": 2, "direction": "up"}}}', '"direction"'),
        ("nan.json", '{"metrics": {"x": {"value": NaN, "threshold": 2, "direction": "lower"}}}', "finite number"),
        ("pattern.json", '{"metrics": {"x": {"value": 1, "expect": "< 2", "pattern": "x"}}}', "exactly one group"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path: Path, name: str, content: str, message: str):
    with pytest.raises(InputError, match=message) as raised:
        load_run(write(tmp_path / name, content))
    assert "\n" not in str(raised.value)


LOG_LINE = "decode step 123456: 32 tokens, accept length 3.9\n"


def test_a_large_junit_file_is_read_in_bounded_memory(tmp_path: Path):
    """Memory holds one test case at a time, its text bounded, whatever the file holds: here failing cases with
    long logs, each in its own suite, then one case whose system-out alone is most of the file."""
    path = tmp_path / "large.xml"
    with path.open("w") as out:
        out.write('<testsuites><testsuite name="big"><properties><property name="commit" value="c0ffee"/></properties>')
        for index in range(20):
            out.write(f'<testsuite><testcase classname="tests.test_big" name="test_{index}"><failure message="boom">')
            out.write(LOG_LINE * 4_000 + "</failure></testcase></testsuite>")
        out.write('<testcase classname="tests.test_big" name="test_chatty"><system-out>')
        out.write(LOG_LINE * 160_000 + "last line</system-out></testcase></testsuite></testsuites>")
    size = path.stat().st_size
    assert size > 10_000_000
    tracemalloc.start()
    try:
        run = load_run(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size // 10, (peak, size)
    assert (run.commit, len(run.cases)) == ("c0ffee", 21)
    failed = run.cases["tests.test_big::test_7"]
    assert (failed.outcome, failed.message) == (Outcome.FAILED, "boom")
    chatty = run.cases["tests.test_big::test_chatty"]
    assert chatty.outcome is Outcome.PASSED
    assert len(chatty.text) < MAX_TEXT_CHARS + 100
    assert chatty.text.startswith(LOG_LINE)
    assert chatty.text.endswith(LOG_LINE + "last line")


def test_results_that_disagree_on_their_commit_are_refused(tmp_path: Path):
    write(tmp_path / "run" / "a.json", '{"commit": "aaa", "metrics": {}}')
    write(tmp_path / "run" / "b.json", '{"commit": "bbb", "metrics": {}}')
    with pytest.raises(InputError, match="records commit bbb but other results of the same run record aaa"):
        load_run(tmp_path / "run")


def test_missing_and_empty_paths(tmp_path: Path):
    with pytest.raises(InputError, match="no such file or directory"):
        load_run(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"no \*\.xml or \*\.json results"):
        load_run(tmp_path / "empty")
