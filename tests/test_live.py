"""LiveObserver on a real (forced) terminal console: Live's own thread renders the observer's state."""

from __future__ import annotations

import io
import re
import time
from datetime import UTC, datetime

from rich.console import Console

from bisector.cli.live import LiveObserver
from bisector.core.progress import Progress
from bisector.vocab.domain import Commit, StepResult, Verdict
from bisector.workers.executor import Assignment


def commit(position: int) -> Commit:
    return Commit(
        position, f"{position:040x}", f"change {position}", "a <a@example.com>", datetime(2026, 1, 1, tzinfo=UTC)
    )


def test_live_table_and_step_lines_on_a_terminal() -> None:
    out = io.StringIO()
    observer = LiveObserver(Console(file=out, force_terminal=True, width=120))
    assert observer.live is not None
    observer.step_started(7, commit(3), 1, Assignment("local-1", "localhost", (0,)))
    observer.progress(Progress(10, 4, 1, 2, 3, commit(0), commit(9), building_ahead=(commit(2), commit(6))))
    shown = Console(file=io.StringIO(), width=120)
    with shown.capture() as captured:
        shown.print(observer.render())
    assert "4 of 10 commits still suspect" in captured.get()
    assert "building images ahead: #2 0000000000, #6 0000000000" in captured.get()
    assert "#3 000000000000" in captured.get()
    assert "local-1" in captured.get()
    time.sleep(0.3)  # at least one refresh by Live's thread
    result = StepResult(step_id=7, sha=commit(3).sha, verdict=Verdict.BAD, log_path="", worker="local-1", run_s=1.0)
    observer.step_finished(result, commit(3), "slow")
    observer.finished(None)  # type: ignore[arg-type]
    assert observer.live is None
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "4 of 10 commits still suspect" in text  # drawn by Live's thread
    assert "slow 000000000000 #3 on local-1 in 1.0s" in text  # in the bisect's terms


def test_a_step_line_shows_a_metric_regex_as_written() -> None:
    out = io.StringIO()
    observer = LiveObserver(Console(file=out, width=200))
    detail = "no match for metric regex 'v: ([a-z0-9.]+)' in the output"
    result = StepResult(step_id=1, sha=commit(3).sha, verdict=Verdict.SKIP, log_path="", worker="w", detail=detail)
    observer.step_finished(result, commit(3), "skip")
    observer.note("[bold]a note[/] with brackets")
    assert "'v: ([a-z0-9.]+)'" in out.getvalue()
    assert "[bold]a note[/] with brackets" in out.getvalue()


def test_a_long_list_of_images_built_ahead_names_the_first_few_and_counts_the_rest() -> None:
    observer = LiveObserver(Console(file=io.StringIO(), force_terminal=True, width=120))
    building = tuple(commit(p) for p in range(10, 82))  # W=8: the next round for each of the 9 ways, 72 images
    observer.progress(Progress(200, 199, 8, 0, 16, commit(0), commit(199), building_ahead=building))
    shown = Console(file=io.StringIO(), width=120)
    with shown.capture() as captured:
        shown.print(observer.render())
    observer.finished(None)  # type: ignore[arg-type]
    assert "building images ahead: #10 0000000000, #11 0000000000, #12 0000000000, #13 0000000000 and 68 more" in (
        captured.get()
    )
