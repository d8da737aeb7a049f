"""A test that prints without bound (one 100 MB line, 500 MB of lines): the step's detail is a capped tail, its
log on disk is capped and says so, and the worker's memory stays bounded."""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic import culprit_history
from worker_steps import run_one, step_request

from bisector.vocab.domain import Verdict
from bisector.workers.local import LocalExecutor
from bisector.workers.output import LOG_END_BYTES, StepLog

MB = 1_000_000
PRINTERS = {
    "one 100 MB line": f"head -c {100 * MB} /dev/zero | tr '\\0' x; echo; echo the end; exit 1",
    "500 MB of lines": f"yes 'a line the failing test prints, again and again' | head -c {500 * MB}; "
    "echo the end; exit 1",
}
WORKER_PEAK_RSS_LIMIT_BYTES = 300 << 20
DETAIL_TAIL_BYTES = 8 << 10  # what the tool promises (workers/output.py)
LOG_CAP_BYTES = 64 << 20


def peak_rss_bytes(pid: int) -> int:
    """The process's high-water mark of resident memory (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


@pytest.mark.parametrize("printer", list(PRINTERS))
def test_a_test_printing_without_bound_leaves_a_capped_detail_and_log(tmp_path: Path, printer: str):
    history = culprit_history(tmp_path / "repo", 2, 1)
    with LocalExecutor(str(history.path), workers=1) as executor:
        worker = executor.worker_pids()["local-0"]
        assert worker is not None
        before = peak_rss_bytes(worker)
        result = run_one(executor, step_request(history, 1, 0, PRINTERS[printer], tmp_path / "logs"))
        peak = peak_rss_bytes(worker)
    assert result.verdict is Verdict.BAD
    assert len(result.detail.encode()) <= DETAIL_TAIL_BYTES + 100, len(result.detail.encode())
    assert result.detail.rstrip().endswith("the end")
    log = Path(result.log_path)
    assert log.stat().st_size <= LOG_CAP_BYTES
    with log.open("rb") as file:
        file.seek(-(64 << 10), 2)
        end = file.read()
    assert b"[gpu-bisect: log truncated at its per-step cap" in log.read_bytes()[LOG_CAP_BYTES // 2 :]
    assert end.rstrip().endswith(b"the end")  # the log still ends where the test ended
    print(f"worker peak RSS {peak >> 20} MiB (before the step: {before >> 20} MiB)")
    assert peak < WORKER_PEAK_RSS_LIMIT_BYTES, f"worker peak RSS {peak >> 20} MiB (before the step: {before >> 20})"


def test_the_detail_is_cut_on_a_character_boundary(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    wide = "printf '€%.0s' $(seq 100000); echo; printf 'Fehler: Prüfung fehlgeschlagen\\n'; exit 1"
    with LocalExecutor(str(history.path), workers=1) as executor:
        result = run_one(executor, step_request(history, 1, 0, wide, tmp_path / "logs"))
    assert result.verdict is Verdict.BAD
    assert len(result.detail.encode()) <= DETAIL_TAIL_BYTES + 100
    assert "\ufffd" not in result.detail  # no character cut in half
    assert "€€€" in result.detail
    assert result.detail.endswith("Fehler: Prüfung fehlgeschlagen")


def test_a_log_a_second_writer_appends_to_keeps_each_ones_end_and_stays_bounded(tmp_path: Path):
    """The build's part of a step's log, finished, then the test's part appended by another process (a Ray image's
    runner): each part's end is kept, a finish says each cut once, and the file stays within one end more."""
    cap = 4 * LOG_END_BYTES
    path = tmp_path / "step.log"
    with path.open("ab", buffering=0) as file:
        build = StepLog(file, cap)
        build.write(b"b" * (2 * cap) + b"build's end\n")
        build.finish()
        build.finish()  # a second finish adds nothing
    with path.open("ab", buffering=0) as file:
        test = StepLog(file, cap)
        test.write(b"t" * (2 * cap) + b"test's end\n")
        test.finish()
    text = path.read_bytes()
    assert text.count(b"[gpu-bisect: log truncated") == 2
    assert text.index(b"build's end") < text.index(b"test's end")
    assert text.endswith(b"test's end\n")
    assert len(text) <= cap + LOG_END_BYTES + 512
