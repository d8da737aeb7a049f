"""The report's failed steps point at their logs: a path that is here, or says why there is none."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from bisect_helpers import run_cli, synthetic_spec
from rich.console import Console
from synthetic import culprit_history

from bisector.db.store import Store
from bisector.report.markdown import render_markdown
from bisector.report.model import BisectReport
from bisector.report.text import print_text
from bisector.runner.coordinator import prepare_bisect
from bisector.vocab.domain import ErrorKind, StepResult, Verdict


def test_a_failed_steps_log_that_is_not_on_this_host_is_said_to_be_elsewhere(tmp_path: Path, store: Store) -> None:
    history = culprit_history(tmp_path / "repo", 10, 6)
    bisect_id = prepare_bisect(store, synthetic_spec(history.path, history.shas[0], history.shas[-1], explain=False))
    here, elsewhere = tmp_path / "here.log", tmp_path / "node-2" / "step.log"  # a Ray step given up on elsewhere
    here.write_text("OOM\n")
    for sha, log in ((history.shas[3], here), (history.shas[4], elsewhere)):
        step = store.start_step(bisect_id, sha, 1, "ray-0", "node-2", (), datetime.now(UTC))
        result = StepResult(
            step, sha, Verdict.ERROR, error_kind=ErrorKind.STALLED, detail="no result", log_path=str(log)
        )
        store.finish_step(step, result, datetime.now(UTC))
    console = Console(record=True, width=400)
    print_text(console, BisectReport.load(store, bisect_id))
    shown = console.export_text()
    assert f"log (step id 1): {here}\n" in shown
    assert f"log (step id 2): {elsewhere} (not on this host)" in shown


def test_a_failed_steps_log_is_named_with_the_step_id_in_its_file_name_not_only_the_reports_number(
    tmp_path: Path, store: Store
) -> None:
    """In a store of several bisects, the report numbers a bisect's steps 1..N while their logs are named by the
    store's step id (step-<id>-...): the log line says which id it names."""
    history = culprit_history(tmp_path / "repo", 10, 6)
    spec = synthetic_spec(history.path, history.shas[0], history.shas[-1], explain=False)
    earlier = prepare_bisect(store, spec)
    store.start_step(earlier, history.shas[2], 1, "local-0", "here", (), datetime.now(UTC))
    bisect_id = prepare_bisect(store, spec)
    sha = history.shas[3]
    step = store.start_step(bisect_id, sha, 1, "local-0", "here", (), datetime.now(UTC))
    assert step != 1  # the report's step 1
    log = tmp_path / f"step-{step}-{sha[:12]}.log"
    log.write_text("OOM\n")
    result = StepResult(step, sha, Verdict.ERROR, error_kind=ErrorKind.STALLED, detail="no result", log_path=str(log))
    store.finish_step(step, result, datetime.now(UTC))
    report = BisectReport.load(store, bisect_id)
    console = Console(record=True, width=400)
    print_text(console, report)
    shown = console.export_text()
    assert f"  step 1 at {sha[:12]} (error/stalled): no result\n    log (step id {step}): {log}\n" in shown
    markdown = render_markdown(report)
    assert f"- step 1 at `{sha[:12]}` (error/stalled): no result; log (step id {step}) `{log}`" in markdown


def test_show_prints_as_many_log_lines_as_tail_asks_and_none_for_0(tmp_path: Path, store: Store) -> None:
    history = culprit_history(tmp_path / "repo", 10, 6)
    bisect_id = prepare_bisect(store, synthetic_spec(history.path, history.shas[0], history.shas[-1], explain=False))
    log = tmp_path / "step.log"
    log.write_text("first line\nsecond line\nlast line\n")
    step = store.start_step(bisect_id, history.shas[3], 1, "local-0", "here", (), datetime.now(UTC))
    store.finish_step(step, StepResult(step, history.shas[3], Verdict.GOOD, log_path=str(log)), datetime.now(UTC))
    db = tmp_path / "bisect.db"
    for tail, lines in (("0", ""), ("1", "last line"), ("2", "second line\nlast line")):
        shown = run_cli("show", str(bisect_id), "--tail", tail, "--format", "json", db=db)
        assert [step["log_tail"] for step in json.loads(shown.stdout)["steps"]] == [lines], shown.stderr
    text = run_cli("show", str(bisect_id), "--tail", "0", db=db).stdout
    assert "last line" not in text
    assert "step 1:" not in text  # no panel of log lines, not even an empty one
    assert "last line" in run_cli("show", str(bisect_id), "--tail", "1", db=db).stdout
