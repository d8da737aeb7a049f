"""`bisect triage` as CI runs it: real subprocesses, real repositories, real pytest runs, real bisects."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bisect_helpers import run_cli
from triage_repo import FIXTURES, calc_repo, import_repo, pytest_junit, results, serving_repo
from webhook import webhook


@pytest.fixture
def serving(tmp_path: Path):
    repo = serving_repo(tmp_path / "repo")
    good = results(tmp_path, "good.xml", repo.good, "good/junit.xml")
    results(tmp_path, "good_metrics.json", repo.good, "good/metrics.json")
    results(tmp_path, "bad.xml", repo.serving, "bad/junit.xml")
    results(tmp_path, "bad_metrics.json", repo.serving, "bad/metrics.json")
    return repo, good.parent, tmp_path / "bad"


def test_markdown_summary_and_exit_1_for_regressions(serving):
    repo, good, bad = serving
    done = run_cli("triage", str(good), str(bad), "--repo", str(repo.path))
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert out.startswith(f"### gpu-bisect triage: **6 regression(s)** between `{repo.good[:12]}` (good)")
    assert "infrastructure: 6 · flaky: 5 · regression: 6 (noise band 1%)" in out
    assert "| `tests.test_serving::test_oom` | infrastructure | infrastructure signature 'built-in': CUDA out" in out
    assert "| `decode_latency_ms` | flaky | within the noise band: 51.4 vs threshold 51" in out
    assert f"| 1 | `{repo.gemm[:12]}` | #12 | Tune the GEMM dispatch threshold (#12) |" in out
    assert out.index("| regression |") < out.index("| flaky |") < out.index("| infrastructure |")


def test_json_shape(serving):
    repo, good, bad = serving
    done = run_cli(
        "triage", str(good), str(bad), "--repo", str(repo.path), "--format", "json",
        "--signatures", str(FIXTURES / "signatures.yaml"), "--good", repo.good[:8],
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert (report["good"], report["bad"]) == (repo.good, repo.serving)
    assert report["counts"] == {"infrastructure": 7, "flaky": 5, "regression": 5}
    for failure in report["failures"]:
        assert {"test", "class", "reason", "kind", "bisectable"} <= set(failure)
        assert failure["class"] in ("infrastructure", "flaky", "regression")
    latency = next(f for f in report["failures"] if f["test"] == "decode_latency_ms")
    assert latency | {"reason": ""} == {
        "test": "decode_latency_ms", "kind": "metric", "class": "flaky", "reason": "", "bisectable": False,
        "value": 51.4, "threshold": 51.0, "direction": "lower",
    }  # fmt: skip
    assert [(s["sha"], s["subject"], s["pr"]) for s in report["suspects"]] == [
        (repo.gemm, "Tune the GEMM dispatch threshold (#12)", 12),
        (repo.serving, "Refactor the serving loop (#13)", 13),
        (repo.docs, "Document the scheduler (#11)", 11),
    ]
    assert report["suspects"][0]["touched"] == ["kernels/gemm.py"]


def test_exit_0_without_regressions(serving, tmp_path: Path):
    repo, good, _ = serving
    rerun = results(tmp_path, "good.xml", repo.serving, "rerun/junit.xml")  # same results, a later commit
    done = run_cli("triage", str(good / "junit.xml"), str(rerun), "--repo", str(repo.path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("### gpu-bisect triage: no regression between")
    assert "| `tests.test_serving::test_preexisting` | flaky | pre-existing" in done.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bad", "no-such-rev"], "bisect: error: unknown revision 'no-such-rev' in "),
        (["--noise-band", "lots"], "bisect: error: noise band 'lots': write an absolute amount (0.5) or a percentage"),
        (["--notify", "http://127.0.0.1:9/x"], "bisect: error: --notify needs --submit"),
        (["--signatures", "/nonexistent.toml"], "bisect: error: --signatures /nonexistent.toml: No such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(serving, extra: list[str], message: str):
    repo, good, bad = serving
    done = run_cli("triage", str(good), str(bad), "--repo", str(repo.path), *extra)
    assert done.returncode == 2
    assert done.stderr.startswith(message), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_results_without_commits_say_so(tmp_path: Path):
    repo = serving_repo(tmp_path / "repo")
    plain = tmp_path / "plain.xml"
    plain.write_text((FIXTURES / "bad.xml").read_text().replace('<property name="commit" value="@COMMIT@"/>', ""))
    done = run_cli("triage", str(plain), str(plain), "--repo", str(repo.path))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "bisect: error: no good commit: give --good REV, or record it in the good results "
        '(JUnit <property name="commit" value="..."/>, or "commit" in the metrics JSON)'
    )


@pytest.mark.slow
def test_submit_bisects_each_regression_once_and_notifies(tmp_path: Path):
    """Real pytest runs at both ends, then one bisect per regressed test (parameters grouped) and metric."""
    repo = calc_repo(tmp_path / "repo")
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    pytest_junit(repo.path, repo.shas[0], good / "junit.xml")
    pytest_junit(repo.path, repo.shas[-1], bad / "junit.xml")
    metric = {"threshold": 60, "direction": "lower", "run": f"{sys.executable} bench.py"}
    (good / "metrics.json").write_text(json.dumps({"metrics": {"latency_ms": {"value": 50, **metric}}}))
    (bad / "metrics.json").write_text(json.dumps({"metrics": {"latency_ms": {"value": 80, **metric}}}))
    with webhook() as hook:
        done = run_cli(
            "triage", str(good), str(bad), "--repo", str(repo.path), "--good", repo.shas[0], "--bad", "main",
            "--submit", "--executor", "inprocess", "--workers", "2", "--format", "json", "--notify", hook.url,
            "--no-explain", "--signatures", str(FIXTURES / "signatures.toml"),
            "--run-template", f"{sys.executable} -m pytest -q -p no:cacheprovider {{test}}",
            db=tmp_path / "b.db",
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"] == {"infrastructure": 0, "flaky": 0, "regression": 4}
    found = {row["test"]: row for row in report["bisects"]}
    assert set(found) == {"tests/test_calc.py::test_add", "tests/test_calc.py::test_double", "latency_ms"}
    assert found["tests/test_calc.py::test_double"]["failures"] == [
        "tests.test_calc::test_double[2]",
        "tests.test_calc::test_double[3]",
    ]
    assert {test: (row["status"], row["first_bad"]) for test, row in found.items()} == {
        "tests/test_calc.py::test_add": ("found", repo.broken),
        "tests/test_calc.py::test_double": ("found", repo.broken),
        "latency_ms": ("found", repo.slow),
    }
    assert sorted(row["id"] for row in found.values()) == [1, 2, 3]
    assert all(row["notified"] for row in found.values())
    posted = {payload["id"]: payload for _, payload in hook.posts}
    assert {bisect_id: posted[bisect_id]["first_bad"]["sha"] for bisect_id in posted} == {
        row["id"]: row["first_bad"] for row in found.values()
    }
    assert all(payload["markdown"].startswith(f"### gpu-bisect #{i}: found") for i, payload in posted.items())
    status = run_cli("report", str(found["latency_ms"]["id"]), "--format", "json", db=tmp_path / "b.db")
    spec = json.loads(status.stdout)["spec"]
    assert spec["infra_patterns"] == ["503 Service Unavailable"]
    assert (spec["metric"], spec["expect"]) == (r"latency_ms\s*[:=]\s*([-+]?[0-9.]+(?:[eE][-+]?\d+)?)", "<= 60")


@pytest.mark.slow
def test_submit_bisects_a_module_broken_at_collection_once_and_finds_the_commit(tmp_path: Path):
    """Real pytest runs: the bad commit's JUnit has one collection error for tests/test_ops.py and one for
    tests/gpu (its conftest.py), none of their tests; each becomes one bisect that runs it and finds the commit."""
    repo = import_repo(tmp_path / "repo")
    pytest_junit(repo.path, repo.good, tmp_path / "good.xml")
    pytest_junit(repo.path, repo.docs, tmp_path / "bad.xml")
    done = run_cli(
        "triage", str(tmp_path / "good.xml"), str(tmp_path / "bad.xml"), "--repo", str(repo.path),
        "--good", repo.good, "--bad", repo.docs, "--submit", "--executor", "inprocess", "--format", "json",
        "--no-explain", "--run-template", f"{sys.executable} -m pytest -q -p no:cacheprovider {{test}}",
        db=tmp_path / "b.db",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"] == {"infrastructure": 0, "flaky": 0, "regression": 2}
    found = {row["test"]: (row["failures"], row["status"], row["first_bad"]) for row in report["bisects"]}
    assert found == {
        "tests/test_ops.py": (["tests.test_ops"], "found", repo.broken),
        "tests/gpu": (["tests.gpu"], "found", repo.broken),
    }


def test_submit_never_bisects_infrastructure_or_flaky_failures(serving, tmp_path: Path):
    repo, good, bad = serving
    (bad / "metrics.json").unlink()
    (good / "metrics.json").unlink()
    junit = bad / "junit.xml"  # only infrastructure and flaky failures left
    text = junit.read_text()
    for regressed in (
        "test_accept_length",
        "test_artifact_upload",
        "test_new_feature",
        "test_small[8]",
        "test_small[16]",
    ):
        start = text.index(f'name="{regressed}"')
        text = text[:start] + text[start:].replace("<failure", "<skipped", 1).replace("</failure>", "</skipped>", 1)
    junit.write_text(text)
    done = run_cli(
        "triage", str(good), str(bad), "--repo", str(repo.path), "--submit", "--executor", "inprocess",
        db=tmp_path / "b.db",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "**Bisects** (0 started; infrastructure and flaky failures are never bisected):" in done.stdout
    assert "infrastructure: 6 · flaky: 3 · regression: 0" in done.stdout
