"""workers/node_files.py: a step on another node than the coordinator's writes the files its env names under the
bisect's log folder into the node's own log folder, and they come back with its result."""

from __future__ import annotations

from pathlib import Path

from bisector.vocab.metric import MetricSpec
from bisector.workers.executor import StepRequest
from bisector.workers.node_files import PACKAGE_DIR, UNSHIPPED_FILE, NodeFiles, deliver


def request(coordinator_logs: Path, env: dict[str, str]) -> StepRequest:
    return StepRequest(
        step_id=3, bisect_id=1, sha="a" * 40, attempt=1, repo="/repo", run_cmd="true", metric=MetricSpec(),
        log_path=str(coordinator_logs / "step-3-probe-probe.log"), timeout_s=60, env=env,
    )  # fmt: skip


def test_the_paths_under_the_log_folder_move_to_the_nodes_and_their_files_come_back(tmp_path: Path):
    coordinator, node = tmp_path / "coordinator" / "bisect-1", tmp_path / "node" / "bisect-1"
    (node / "probe").mkdir(parents=True)
    (node / "probe" / "left-by-an-earlier-bisect").write_text("old")
    hook = "/elsewhere/site-packages/bisector/analysis/hook"  # the coordinator's copy, not on this node
    env = {"BISECT_PROBE_DIR": str(coordinator / "probe"), "BISECT_KERNEL_TRACE": str(coordinator / "t.jsonl"),
           "PYTHONPATH": f"{hook}:/opt/lib", "OTHER": "/data/x"}  # fmt: skip
    local, files = NodeFiles.of(request(coordinator, env), node)
    assert local.env["BISECT_PROBE_DIR"] == str(node / "probe")
    assert local.env["BISECT_KERNEL_TRACE"] == str(node / "t.jsonl")
    assert local.env["PYTHONPATH"] == f"{PACKAGE_DIR / 'analysis' / 'hook'}:/opt/lib"
    assert local.env["OTHER"] == "/data/x"
    assert not (node / "probe").exists()
    (node / "probe").mkdir()
    (node / "probe" / "files-1.jsonl").write_text('["cwd", "/w"]\n')
    (node / "t.jsonl").write_text("{}\n")
    shipped = files.collect()
    assert shipped == {str(coordinator / "probe" / "files-1.jsonl"): b'["cwd", "/w"]\n',
                       str(coordinator / "t.jsonl"): b"{}\n"}  # fmt: skip
    deliver(shipped)
    assert (coordinator / "probe" / "files-1.jsonl").read_text() == '["cwd", "/w"]\n'


def test_files_over_the_limit_stay_on_the_node_and_a_note_says_why(tmp_path: Path):
    coordinator, node = tmp_path / "coordinator", tmp_path / "node"
    _, files = NodeFiles.of(request(coordinator, {"BISECT_PROBE_DIR": str(coordinator / "probe")}), node)
    (node / "probe").mkdir(parents=True)
    (node / "probe" / "coverage.1").write_bytes(b"x" * 100)
    (shipped,) = files.collect(limit_bytes=99).items()
    assert shipped[0] == str(coordinator / "probe" / UNSHIPPED_FILE)
    assert b"100 bytes" in shipped[1]
