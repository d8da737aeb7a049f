"""Every failure class, from the JUnit and metrics fixtures, against a real repository."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from html import escape
from pathlib import Path

import pytest
import triage_repo
from triage_repo import FIXTURES, import_repo, init_repo, pytest_junit, results, serving_repo

from bisector.triage import Failure, FailureClass, NoiseBand, TriageReport, triage_runs
from bisector.triage.classify import classify
from bisector.triage.model import CaseResult, Outcome, RunResults
from bisector.triage.signatures import builtin_signatures, load_signatures
from bisector.triage.submit import plan_bisects
from bisector.vocab.errors import InputError

INFRA, FLAKY, REGRESSION = FailureClass.INFRASTRUCTURE, FailureClass.FLAKY, FailureClass.REGRESSION


@pytest.fixture
def runs(tmp_path: Path):
    repo = serving_repo(tmp_path / "repo")
    good, bad = tmp_path / "good", tmp_path / "bad"
    results(tmp_path, "good.xml", repo.good, "good/junit.xml")
    results(tmp_path, "good_metrics.json", repo.good, "good/metrics.json")
    results(tmp_path, "bad.xml", repo.serving, "bad/junit.xml")
    results(tmp_path, "bad_metrics.json", repo.serving, "bad/metrics.json")
    return repo, good, bad


def by_test(report: TriageReport) -> dict[str, Failure]:
    return {f.test: f for f in report.failures}


def test_every_class_and_its_reason(runs):
    repo, good, bad = runs
    report = triage_runs(good, bad, repo=repo.path)
    assert (report.good, report.bad) == (repo.good, repo.serving)  # read from the results' properties
    failures = by_test(report)
    expected = {
        "tests.test_serving::test_connection_refused": (INFRA, "Connection refused"),
        "tests.test_serving::test_graph_capture": (INFRA, "operation not permitted when stream is capturing"),
        "tests.test_serving::test_nccl_allreduce": (INFRA, "'NCCL': Watchdog caught collective operation timeout"),
        "tests.test_serving::test_oom": (INFRA, "CUDA out of memory"),
        "tests.test_serving::test_timeout": (INFRA, "'timeout': Failed: Timeout >"),
        "tests.test_serving::test_lost_runner": (INFRA, "'lost runner': The runner has received a shutdown signal"),
        "tests.test_serving::test_retry_passes": (FLAKY, "passed on retry after 1 failed attempt(s)"),
        "tests.test_serving::test_twice": (FLAKY, "passed on retry after 1 failed attempt(s)"),
        "tests.test_serving::test_preexisting": (FLAKY, "pre-existing: failed the same way in the good run"),
        "decode_latency_ms": (FLAKY, "within the noise band: 51.4 vs threshold 51 (lower is better), 0.4 past"),
        "accept_length": (FLAKY, "pre-existing: past the threshold in the good run too (3.1)"),
        "tests.test_serving::test_accept_length": (REGRESSION, "failed (passed in the good run): AssertionError"),
        "tests.test_serving::test_artifact_upload": (REGRESSION, "503 Service Unavailable"),
        "tests.test_serving::test_new_feature": (REGRESSION, "absent from the good run, so not bisected"),
        "tests.test_kernels.TestGemm::test_small[8]": (REGRESSION, "max abs diff 0.0312"),
        "tests.test_kernels.TestGemm::test_small[16]": (REGRESSION, "max abs diff 0.0625"),
        "throughput_tok_s": (REGRESSION, "700 vs threshold 1000 (higher is better), 300 past"),
    }
    assert set(failures) == set(expected)  # passing and skipped tests are not failures
    for test, (cls, reason) in expected.items():
        assert failures[test].failure_class is cls, (test, failures[test].reason)
        assert reason in failures[test].reason, (test, failures[test].reason)
    assert failures["tests.test_serving::test_accept_length"].bisectable
    assert not failures["tests.test_serving::test_new_feature"].bisectable
    assert report.counts() == {INFRA: 6, FLAKY: 5, REGRESSION: 6}


def test_the_noise_band_decides_between_flaky_and_regression(runs):
    repo, good, bad = runs
    absolute_wide = by_test(triage_runs(good, bad, repo=repo.path, noise_band="0.5"))
    assert absolute_wide["decode_latency_ms"].failure_class is FLAKY
    # the file's own band ("1%") wins over --noise-band; without it --noise-band decides
    (bad / "metrics.json").write_text((bad / "metrics.json").read_text().replace('"noise_band": "1%",', ""))
    assert by_test(triage_runs(good, bad, repo=repo.path, noise_band="0.5"))["decode_latency_ms"].failure_class is FLAKY
    narrow = by_test(triage_runs(good, bad, repo=repo.path, noise_band="0.1"))["decode_latency_ms"]
    assert narrow.failure_class is REGRESSION
    assert "band 0.1 = 0.1" in narrow.reason
    assert by_test(triage_runs(good, bad, repo=repo.path, noise_band="0%"))["decode_latency_ms"].failure_class is (
        REGRESSION
    )


PERF_JUNIT = """<testsuite name="perf" tests="1">
  <properties><property name="commit" value="{commit}"/></properties>
  <testcase classname="tests.test_perf" name="test_decode_latency" time="1.0">{failure}</testcase>
</testsuite>
"""


@pytest.mark.parametrize("message", ["AssertionError: assert 51.4 <= 51.0", "decode latency 51.4 ms > 51.0 ms"])
def test_a_test_failing_by_a_measured_value_meets_the_noise_band_as_a_metric_does(tmp_path: Path, message: str):
    """The same measurement (51.4 ms against 51.0) gets the same class whether a metrics JSON records it or a
    failing test's message states it."""
    repo = serving_repo(tmp_path / "repo")
    runs = {"good": (repo.good, "", 50.2), "bad": (repo.serving, f'<failure message="{escape(message)}"/>', 51.4)}
    for run, (commit, failure, value) in runs.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "junit.xml").write_text(PERF_JUNIT.format(commit=commit, failure=failure))
        metric = {"value": value, "threshold": 51.0, "direction": "lower"}
        (tmp_path / run / "metrics.json").write_text(json.dumps({"commit": commit, "metrics": {"latency": metric}}))
    for band, expected in (("1%", FLAKY), ("0.5", FLAKY), ("0.1", REGRESSION), ("0%", REGRESSION)):
        failures = by_test(triage_runs(tmp_path / "good", tmp_path / "bad", repo=repo.path, noise_band=band))
        test, metric = failures["tests.test_perf::test_decode_latency"], failures["latency"]
        assert (test.failure_class, metric.failure_class) == (expected, expected), (band, test.reason)
        if expected is FLAKY:
            assert test.reason.startswith("within the noise band: 51.4 vs threshold 51, 0.4 past, band ")
        else:
            assert test.bisectable


def test_a_test_failing_differently_in_the_good_run_is_a_regression(runs):
    repo, good, bad = runs
    junit = good / "junit.xml"
    junit.write_text(junit.read_text().replace("expected 12 workers, got 11", "KeyError: 'workers'"))
    failure = by_test(triage_runs(good, bad, repo=repo.path))["tests.test_serving::test_preexisting"]
    assert failure.failure_class is REGRESSION
    assert "failed differently in the good run (AssertionError: KeyError: 'workers')" in failure.reason


@pytest.mark.parametrize("name", ["signatures.toml", "signatures.yaml"])
def test_operator_signatures_come_first(runs, name: str):
    repo, good, bad = runs
    report = triage_runs(good, bad, repo=repo.path, signatures_file=FIXTURES / name)
    failure = by_test(report)["tests.test_serving::test_artifact_upload"]
    assert failure.failure_class is INFRA
    assert failure.reason == "infrastructure signature 'artifact server down': 503 Service Unavailable"
    assert report.infra_patterns == ("503 Service Unavailable",)  # what bisects started from it retry too


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[[signature]]\nname = 'x'\n", "write name, pattern and class as strings"),
        ("[[signature]]\nname = 'x'\npattern = 'a'\nclass = 'regression'\n", "class must be infrastructure or flaky"),
        ("[[signature]]\nname = 'x'\npattern = '('\nclass = 'flaky'\n", "is not a valid regex"),
        ("signature = [", "does not parse"),
        ("title = 'none'\n", "write a list of"),
    ],
)
def test_bad_signature_files(tmp_path: Path, content: str, message: str):
    path = tmp_path / "sigs.toml"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        load_signatures(path)


def test_commits_given_win_and_a_missing_commit_is_named(runs, tmp_path: Path):
    repo, good, bad = runs
    report = triage_runs(good, bad, repo=repo.path, good_rev=repo.docs, bad_rev="main")
    assert (report.good, report.bad) == (repo.docs, repo.serving)
    bare = tmp_path / "bare-bad"
    bare.mkdir()
    (bare / "junit.xml").write_text((bad / "junit.xml").read_text().replace(f'value="{repo.serving}"', 'value=""'))
    with pytest.raises(InputError, match=r"no bad commit: give --bad REV, or record it in the bad results"):
        triage_runs(good, bare, repo=repo.path)
    with pytest.raises(InputError, match="is not an ancestor of the bad run's"):
        triage_runs(good, bad, repo=repo.path, good_rev="main", bad_rev=repo.docs)


@pytest.mark.parametrize(("text", "width"), [("1%", 0.51), ("0.25", 0.25), ("0", 0.0)])
def test_noise_band_parsing(text: str, width: float):
    assert NoiseBand.parse(text).width(51.0) == pytest.approx(width)


@pytest.mark.parametrize("text", ["-1", "abc", "inf", "%"])
def test_bad_noise_bands(text: str):
    with pytest.raises(InputError, match="noise band"):
        NoiseBand.parse(text)


def test_a_regression_that_merely_logs_the_word_timeout_stays_a_regression():
    failed = CaseResult(
        name="t::x", classname="t", case="x", file="", outcome=Outcome.FAILED, message="assert 1 == 2",
        text="config: Timeout=30s, NCCL_TIMEOUT=600\nassert 1 == 2", failed_attempts=0,
    )  # fmt: skip
    passed = replace(failed, outcome=Outcome.PASSED, message="", text="")
    good, bad = RunResults(cases={"t::x": passed}), RunResults(cases={"t::x": failed})
    [failure] = classify(good, bad, builtin_signatures(), NoiseBand.parse("1%"))
    assert (failure.failure_class, failure.bisectable) == (REGRESSION, True)


def real_ci_runs(tmp_path: Path, good_tests: str, bad_tests: str, noise_band: str = "1%") -> dict[str, Failure]:
    """The triage of two real pytest runs (JUnit XML), of tests/test_ci.py as the good and the bad commit hold it."""
    repo = init_repo(tmp_path / "repo")
    good = triage_repo.commit(repo, "Add the CI tests", {"tests/test_ci.py": good_tests})
    bad = triage_repo.commit(repo, "Change the CI tests (#2)", {"tests/test_ci.py": bad_tests})
    pytest_junit(repo, good, tmp_path / "good.xml")
    pytest_junit(repo, bad, tmp_path / "bad.xml")
    report = triage_runs(tmp_path / "good.xml", tmp_path / "bad.xml", repo=repo, good_rev=good, bad_rev=bad,
                         noise_band=noise_band)  # fmt: skip
    return by_test(report)


def test_a_measurement_past_the_band_is_a_regression_though_the_good_run_failed_within_it(tmp_path: Path) -> None:
    """Latency 51.2 ms against 51.0 in the good run (noise), 80.0 ms in the bad run: a regression, whether a failing
    test's message states the values or a metrics JSON records them (the good run's failure was within the band)."""
    test = "def test_decode_latency():\n    latency_ms = {}\n    assert latency_ms <= 51.0\n"
    failures = real_ci_runs(tmp_path, test.format(51.2), test.format(80.0))
    failure = failures["tests.test_ci::test_decode_latency"]
    assert failure.failure_class is REGRESSION, failure.reason
    assert (
        failure.reason
        == "beyond the noise band (1%): assert 80.0 <= 51.0; within it in the good run: assert 51.2 <= 51.0"
    )
    metrics = {"latency": {"value": 51.2, "threshold": 51.0, "direction": "lower"}}
    (tmp_path / "good.json").write_text(json.dumps({"metrics": metrics}))
    metrics["latency"]["value"] = 80.0
    (tmp_path / "bad.json").write_text(json.dumps({"metrics": metrics}))
    repo = tmp_path / "repo"
    report = triage_runs(tmp_path / "good.json", tmp_path / "bad.json", repo=repo, good_rev="main~1", bad_rev="main")
    assert by_test(report)["latency"].failure_class is REGRESSION
    beyond = real_ci_runs(tmp_path / "beyond", test.format(60.0), test.format(80.0))  # past the band in both runs
    assert beyond["tests.test_ci::test_decode_latency"].failure_class is FLAKY


def test_a_count_failing_at_a_zero_threshold_is_a_regression_not_noise(tmp_path: Path) -> None:
    """pytest says `assert 0 > 0` when a test asserts len(outputs) > 0 and gets none: a band relative to a threshold
    of 0 has no width, so nothing is noise there."""
    test = "def test_generates():\n    outputs = {}\n    assert len(outputs) > 0\n"
    failures = real_ci_runs(tmp_path, test.format("['token']"), test.format("[]"))
    failure = failures["tests.test_ci::test_generates"]
    assert (failure.failure_class, failure.bisectable) == (REGRESSION, True), failure.reason
    assert failure.reason.startswith("failed (passed in the good run): assert 0 > 0")


def test_a_kernel_that_faults_is_the_commits_regression_not_the_drivers(tmp_path: Path) -> None:
    """CUDA's `unspecified launch failure` (cudaErrorLaunchFailure) is an exception in a kernel, most often an invalid
    pointer or an out-of-bounds access of the kernel under test: a regression, as a bisect step judges it."""
    good = "def test_gemm():\n    pass\n"
    bad = (
        "def test_gemm():\n    raise RuntimeError('CUDA error: unspecified launch failure\\n'\n"
        "        'CUDA kernel errors might be asynchronously reported at some other API call')\n"
    )
    failure = real_ci_runs(tmp_path, good, bad)["tests.test_ci::test_gemm"]
    assert (failure.failure_class, failure.bisectable) == (REGRESSION, True), failure.reason


MENTIONS = """import socket

import pytest


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_reports_refusal():
    error = {error!r}
    assert "Connection refused" in error


def test_raises_on_refusal():
    with pytest.raises(ConnectionRefusedError):
        {call}


def test_server():
    socket.create_connection(("127.0.0.1", closed_port())).close()
"""


def test_an_assertion_that_names_an_infrastructure_error_stays_the_commits_failure(tmp_path: Path) -> None:
    """A test asserting about a refused connection (`assert "Connection refused" in error`, `pytest.raises(
    ConnectionRefusedError)`) names what it expected: its failure is a regression. A refused connection the test
    met is infrastructure."""
    good = MENTIONS.format(
        error="[Errno 111] Connection refused", call="socket.create_connection(('127.0.0.1', closed_port()))"
    )
    bad = MENTIONS.format(error="connection failed", call="pass")
    failures = real_ci_runs(tmp_path, good.replace("def test_server", "def xtest_server"), bad)
    for name in ("test_reports_refusal", "test_raises_on_refusal"):
        failure = failures[f"tests.test_ci::{name}"]
        assert (failure.failure_class, failure.bisectable) == (REGRESSION, True), failure.reason
    server = failures["tests.test_ci::test_server"]
    assert server.failure_class is INFRA
    assert server.reason == "infrastructure signature 'built-in': Connection refused"


@pytest.mark.parametrize("form", ["xunit1", "xunit2", "classname/name"])
def test_a_module_broken_at_collection_is_one_bisectable_regression_of_its_tests(tmp_path: Path, form: str) -> None:
    """pytest records one collection error for a module it cannot import (JUnit name `tests.test_ops`, no classname;
    xunit1 adds its `file`, xunit2 does not) and for a directory whose conftest.py fails (`tests.gpu`), instead of
    the tests the good run had there. Each is one regression of those tests, bisected once by running the module
    or directory, and reported with the error it raised. Some producers split the name as classname and name."""
    repo = import_repo(tmp_path / "repo")
    family = ("-o", f"junit_family={'xunit1' if form == 'xunit1' else 'xunit2'}")
    pytest_junit(repo.path, repo.good, tmp_path / "good.xml", *family)
    bad = pytest_junit(repo.path, repo.broken, tmp_path / "bad.xml", *family)
    module, directory = "tests.test_ops", "tests.gpu"
    if form == "classname/name":
        bad.write_text(re.sub(r'classname="" name="tests\.(\w+)"', r'classname="tests" name="\1"', bad.read_text()))
        module, directory = "tests::test_ops", "tests::gpu"
    report = triage_runs(tmp_path / "good.xml", bad, repo=repo.path, good_rev=repo.good, bad_rev=repo.broken)
    failures = by_test(report)
    assert set(failures) == {module, directory}  # not the tests the errors kept from running, nor test_other
    assert failures[module].reason.startswith(
        "collection error; its 3 test(s) that passed in the good run did not run: "
        "ImportError: cannot import name 'sub' from 'ops' ("
    )
    assert failures[directory].reason == (
        "collection error; its 1 test(s) that passed in the good run did not run: "
        "ModuleNotFoundError: No module named 'triton_missing'"
    )
    assert all((f.failure_class, f.bisectable) == (REGRESSION, True) for f in failures.values())
    plans, left_out = plan_bisects(report, "pytest {test}")
    assert sorted((plan.run, plan.failures) for plan in plans) == [
        ("pytest tests/gpu", (directory,)),
        ("pytest tests/test_ops.py", (module,)),
    ]
    assert left_out == []
