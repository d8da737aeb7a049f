"""The report's summary lines in plain words: the runtime dispatch table names its m values, no jargon; a commit
known bad but not known first is never called the first bad commit."""

from __future__ import annotations

import json
from pathlib import Path

from bisect_helpers import synthetic_spec
from rich.console import Console
from synthetic import write_history

from bisector.analysis import Explanation, dispatch_diff, parse_dispatch_trace, render_markdown, render_text
from bisector.db.store import Store
from bisector.report import BisectReport, print_text, report_json
from bisector.report import render_markdown as render_report_markdown
from bisector.runner.coordinator import Coordinator
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus, ErrorKind, Verdict


def _trace(verify_kernel: str) -> list[str]:
    rows = []
    for op, n, k in (("kda_gate", 144, 7168), ("kda_out", 1536, 128)):
        rows.append({"op": op, "N": n, "K": k, "m": 1, "kernel": "simt", "reason": "table"})
        rows.append({"op": op, "N": n, "K": k, "m": 4, "kernel": verify_kernel, "reason": "table"})
    return [json.dumps(row) for row in rows]


def test_the_runtime_dispatch_table_names_its_m_values_in_plain_words() -> None:
    explanation = Explanation(
        dispatch=dispatch_diff(parse_dispatch_trace(_trace("simt")), parse_dispatch_trace(_trace("mma")))
    )
    text = " ".join(render_text(explanation, width=200).split())
    assert "runtime dispatch at m = 1, 4 (last good -> first bad)" in text
    assert "2 (op, N, K, m) took another kernel" in text
    assert "the traced runs made 4 dispatch decisions at the last good commit and 4 at the first bad" in text
    assert "decisions traced" not in text
    markdown = render_markdown(explanation)
    assert "<summary>Runtime dispatch at m = 1, 4 (last good -> first bad): 2 (op, N, K, m) took another" in markdown


def test_an_ambiguous_answer_never_calls_its_first_commit_known_bad_the_first_bad_commit(
    tmp_path: Path, store: Store
) -> None:
    history = write_history(tmp_path / "repo", ["good", "good", "skip", "bad", "bad"])
    spec = synthetic_spec(
        history.path, history.shas[0], history.shas[-1], metric=r"metric: ([0-9.]+)", expect=">= 8", explain=False
    )
    record = Coordinator(store, make_executor, poll_interval_s=0.05).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.AMBIGUOUS, history.shas[3])
    report = BisectReport.load(store, record.id)
    console = Console(record=True, width=400)
    print_text(console, report)
    text, markdown = console.export_text(), render_report_markdown(report)
    assert f"reproduce {history.shas[3][:12]}, the first commit known bad, by hand:" in text
    assert f"Reproduce `{history.shas[3][:12]}`, the first commit known bad, by hand:" in markdown
    assert report_json(report)["reproduce_target"] == {"sha": history.shas[3], "why": "the first commit known bad"}
    assert "metric: 10.0000 at the last good commit, 5.0000 at the first commit known bad" in text
    assert "**Metric:** 10.0000 at the last good commit, **5.0000** at the first commit known bad." in markdown
    assert "at the first bad commit" not in text + markdown


def test_search_steps_that_met_an_infrastructure_error_are_said_to_have_given_no_verdict(
    tmp_path: Path, store: Store
) -> None:
    """Every commit's first run meets an NCCL error (retried): the work sentence counted those steps among the
    search steps that tested the commits, saying nothing of the errors."""
    history = write_history(tmp_path / "repo", ["good"] * 5 + ["bad"] * 4)
    flags = tmp_path / "flags"
    flags.mkdir()
    once = f'f={flags}/$(cat counter.txt); if [ ! -e $f ]; then touch $f; echo "NCCL error: unhandled"; exit 1; fi; '
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], run=once + "bash test.sh", explain=False)
    record = Coordinator(store, make_executor, poll_interval_s=0.05).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[5])
    report = BisectReport.load(store, record.id)
    errors = [step for step in report.search_steps if step.verdict is Verdict.ERROR]
    assert errors
    assert {step.error_kind for step in errors} == {ErrorKind.INFRA}
    said = f"{len(report.search_steps)} search step(s) tested them ({len(errors)} ended in an infrastructure error: "
    console = Console(record=True, width=400)
    print_text(console, report)
    assert f"{said}no verdict)" in console.export_text()
    assert f"{said}no verdict)" in render_report_markdown(report)


def test_a_confirmation_counts_the_runs_it_weighed_at_each_commit_not_pairs_it_never_ran(
    tmp_path: Path, store: Store
) -> None:
    """--repeat 3: the confirmation weighs each side's 3 search runs and 3 re-runs. Its words said `over 6 pair(s)`
    beside the report's `6 confirmation run(s) of the first bad commit and the last good one` (3 pairs)."""
    history = write_history(tmp_path / "repo", ["good"] * 10 + ["bad"] * 10)
    spec = synthetic_spec(
        history.path, history.shas[0], history.shas[-1], metric=r"metric: ([0-9.]+)", expect=">= 8", repeat=3,
        max_repeat=6, explain=False,
    )  # fmt: skip
    record = Coordinator(store, make_executor, poll_interval_s=0.05).start(spec)
    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[10])
    report = BisectReport.load(store, record.id)
    runs = [sum(1 for s in report.evidence if s.sha == sha and s.metric is not None) for sha in history.shas[9:11]]
    reason = report.records.confirmation.reason if report.records.confirmation else ""
    assert reason.endswith(f" over {runs[0]} run(s) of the last good commit and {runs[1]} of the first bad commit")
    assert "pair" not in reason
