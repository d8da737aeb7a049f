"""The README's main job, as a user runs it: `bisect demo run` end to end on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # the demo bisect builds images and runs the kernel bench at every step: minutes


def bisect(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args], capture_output=True, text=True, env=env, timeout=900, cwd=cwd
    )


def test_demo_run_builds_images_names_the_planted_culprit_explains_and_minimizes_it(tmp_path: Path):
    done = bisect("demo", "run", "--dir", str(tmp_path / "demo"), "--commits", "40", "--workers", "2",
                  "--minimize", "--format", "json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the bisect named the planted culprit" in done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "found"
    assert report["first_bad"]["metric"] < 4.0
    assert report["last_good"]["metric"] == 4.0
    explanation = report["explanation"]
    rendered = json.dumps(explanation)
    for shape in ("(144, 7168)", "(896, 7168)", "(1536, 128)"):
        assert shape in rendered
    assert "batch-variant" in rendered
    # Each table row says what the traced re-runs made of it: the rows of the shapes they saw dispatched
    # differently are confirmed at run time, and come first.
    rows = [row for row in explanation["static"]["findings"] if row["evidence"] is not None]
    evidence = [row["evidence"] for row in rows]
    assert evidence == sorted(evidence, key=["runtime", "static", "contradicted"].index)
    moved = {f"[({row['N']}, {row['K']})]" for row in explanation["dispatch"]["rows"] if row["changed"]}
    confirmed = [row for row in rows if row["evidence"] == "runtime"]
    assert moved
    assert {row["key"] for row in confirmed} == moved
    assert {row["name"] for row in confirmed} == {"_TUNED_MMA_MIN_M"}
    purposes = [step["purpose"] for step in report["steps"]]
    assert purposes.count("trace") == 2
    # ddmin keeps only decoder table rows of the culprit, none of its unrelated lines.
    minimized = explanation["minimized"]
    assert minimized["status"] == "minimal"
    assert minimized["minimal"]
    assert all(unit["kind"] == "table_entry" for unit in minimized["minimal"])
    assert all(unit["description"].startswith("_TUNED_MMA_MIN_M[") for unit in minimized["minimal"])
    assert len(minimized["minimal"]) < minimized["unit_count"]
    assert purposes.count("minimize") == minimized["test_count"]
    # Each commit's image was built once by the demo's build step (uv venv, compiled piece); commits whose
    # build inputs did not change ran on an earlier commit's image.
    images = [
        step["image"] for step in report["steps"] if step["purpose"] == "search" and step["verdict"] != "cancelled"
    ]
    assert all(images), report["steps"]
    assert {image["source"] for image in images} <= {"built", "cache"}
    assert any(image["source"] == "built" for image in images)
    # The same demo again in the same directory builds nothing.
    again = bisect("demo", "run", "--dir", str(tmp_path / "demo"), "--commits", "40", "--workers", "2",
                   "--no-explain", "--format", "json", cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = json.loads(again.stdout)
    assert rerun["first_bad"]["sha"] == report["first_bad"]["sha"]
    sources = [(step["image"] or {}).get("source") for step in rerun["steps"]]
    assert "built" not in sources
    # a step cancelled before it got to its image has none (W=2 cancels a probe the other's result made moot)
    ran = [source for source, step in zip(sources, rerun["steps"], strict=True) if step["verdict"] != "cancelled"]
    assert set(ran) == {"cache"}


def test_explain_any_commit_without_a_bisect(tmp_path: Path):
    init = bisect("demo", "init", str(tmp_path / "demo"), "--commits", "12", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    repo = tmp_path / "demo"
    culprit = subprocess.run(
        ["git", "log", "--format=%H", "-G", r"\(1536, 128\)", "--", "kernels/tiny_gemm.py"],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout.split()[0]  # fmt: skip
    done = bisect("explain", culprit, "--repo", str(repo), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "_TUNED_MMA_MIN_M[(1536, 128)]" in done.stdout
    unrelated = bisect("explain", "demo-good", "--repo", str(repo), cwd=tmp_path)
    assert unrelated.returncode == 0
    assert bisect("explain", "nosuchrev", "--repo", str(repo), cwd=tmp_path).returncode == 2


def test_demo_refuses_to_overwrite_a_foreign_directory(tmp_path: Path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    done = bisect("demo", "init", str(tmp_path / "mine"), cwd=tmp_path)
    assert done.returncode == 2
    assert "not a gpu-bisect demo repository" in done.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_demo_into_a_folder_that_cannot_be_made_is_one_line_and_exit_2(tmp_path: Path):
    (tmp_path / "a-file").write_text("not a folder")
    done = bisect("demo", "init", str(tmp_path / "a-file" / "demo"), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (
        2,
        f"bisect: error: cannot write the demo repository in {tmp_path / 'a-file' / 'demo'}: Not a directory\n",
    )
    assert (tmp_path / "a-file").read_text() == "not a folder"


def test_demo_run_refuses_a_workers_value_before_writing_the_repository(tmp_path: Path):
    done = bisect("demo", "run", "--dir", str(tmp_path / "demo"), "--workers", "0", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, "bisect: error: --workers must be between 1 and 256 (got 0)\n")
    assert not (tmp_path / "demo").exists()
