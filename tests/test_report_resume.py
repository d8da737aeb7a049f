"""How the faces of a stored bisect say that it waits for a resume (bisector/report/resume.py): the store keeps
neutral words; the local CLI adds `bisect resume ID`, JSON a `resume` key; a served bisect's resume goes to its
server; rows stored with the old words (the local command inside the text) read in the new ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisect_helpers import run_cli, synthetic_spec
from synthetic import SyntheticHistory, culprit_history

from bisector.db.jobs import JobQueue, JobState
from bisector.db.store import Store
from bisector.report import BisectReport, render_markdown, report_json
from bisector.runner.coordinator import prepare_bisect, utc_now
from bisector.vocab.domain import BisectStatus, ErrorKind, StepResult, Verdict

DISK_FULL = "disk full: no space left on /logs writing the step log"
NEUTRAL_DISK_FULL = f"{DISK_FULL}; free space, then resume the bisect"


def paused_on(detail: str, advice: str) -> str:
    return f"paused: the test harness failed 3 times in a row, never the commits (last: disk_full: {detail}); {advice}"


NEUTRAL_PAUSE = paused_on(NEUTRAL_DISK_FULL, "fix it, then resume the bisect")
SERVED = {"source": "/srv/repo", "owner": "alice"}  # what `bisect serve` stores with the bisects it takes on


@pytest.fixture
def history(tmp_path: Path) -> SyntheticHistory:
    return culprit_history(tmp_path / "repo", 6, 3)


def stored(store: Store, history: SyntheticHistory, message: str, detail: str, **extra: object) -> int:
    """A bisect paused on a full disk, with its message and its one step's detail as given."""
    bisect_id = prepare_bisect(store, synthetic_spec(history.path, history.shas[0], "main"), extra=extra)
    step_id = store.start_step(bisect_id, history.shas[3], 1, "local-0", "node", (), utc_now())
    result = StepResult(step_id, history.shas[3], Verdict.ERROR, error_kind=ErrorKind.DISK_FULL, detail=detail)
    store.finish_step(step_id, result, utc_now())
    store.set_status(bisect_id, BisectStatus.PAUSED, message=message)
    return bisect_id


def test_the_local_cli_adds_its_resume_command_to_the_neutral_words(
    tmp_path: Path, store: Store, history: SyntheticHistory
) -> None:
    bisect_id = stored(store, history, NEUTRAL_PAUSE, NEUTRAL_DISK_FULL)
    db = tmp_path / "bisect.db"
    status = run_cli("status", str(bisect_id), db=db)
    assert f"coordinator: none is running it; `bisect resume {bisect_id}` continues" in status.stdout, status.stderr
    assert f"note: {NEUTRAL_PAUSE}" in status.stdout
    report = run_cli("report", str(bisect_id), db=db)
    assert f"resume with: bisect resume {bisect_id}" in report.stdout, report.stderr
    markdown = render_markdown(BisectReport.load(store, bisect_id))
    assert f"Resume with `bisect resume {bisect_id}`." in markdown
    as_json = json.loads(run_cli("report", str(bisect_id), "--format", "json", db=db).stdout)
    assert (as_json["message"], as_json["resume"]) == (NEUTRAL_PAUSE, {"reason": "paused", "served": False})


def test_a_served_bisect_is_resumed_on_its_server_whoever_reads_its_store(
    tmp_path: Path, store: Store, history: SyntheticHistory
) -> None:
    bisect_id = stored(store, history, NEUTRAL_PAUSE, NEUTRAL_DISK_FULL, **SERVED)
    status = run_cli("status", str(bisect_id), db=tmp_path / "bisect.db")
    assert f"`bisect resume --server URL {bisect_id}` continues" in status.stdout, status.stderr
    assert f"`bisect resume {bisect_id}`" not in status.stdout
    assert report_json(BisectReport.load(store, bisect_id))["resume"] == {"reason": "paused", "served": True}


def test_rows_stored_with_the_local_command_in_their_words_read_in_the_neutral_ones(
    store: Store, history: SyntheticHistory
) -> None:
    """Before the neutral words, the pause and the full disk advised `bisect resume ID` in the stored text."""
    old_detail = f"{DISK_FULL}; free space and `bisect resume 1`"
    old_pause = paused_on(old_detail, "fix it, then `bisect resume 1`")
    bisect_id = stored(store, history, old_pause, old_detail, **SERVED)
    assert bisect_id == 1
    report = report_json(BisectReport.load(store, bisect_id))
    assert (report["message"], [s["detail"] for s in report["steps"]]) == (NEUTRAL_PAUSE, [NEUTRAL_DISK_FULL])
    assert store.get_bisect(bisect_id).message == old_pause  # read, never rewritten


def test_only_a_bisect_that_a_resume_would_continue_has_a_resume_key(store: Store, history: SyntheticHistory) -> None:
    spec = synthetic_spec(history.path, history.shas[0], "main")
    local, served = prepare_bisect(store, spec), prepare_bisect(store, spec, extra=SERVED)

    def resume(bisect_id: int) -> object:
        return report_json(BisectReport.load(store, bisect_id))["resume"]

    assert (resume(local), resume(served)) == ({"reason": "unowned", "served": False}, None)  # a server runs its own
    store.set_status(local, BisectStatus.FOUND, finished=utc_now(), first_bad=history.shas[3])
    assert resume(local) is None


def test_a_local_mark_of_a_served_bisect_leaves_running_it_to_its_server(
    tmp_path: Path, store: Store, history: SyntheticHistory
) -> None:
    """`bisect mark` over a served bisect's store: a running one is its server's to run again, a reopened one is
    resumed on its server, never by a local `bisect resume ID` (a paused one: tests/service/test_serve_resume.py)."""
    spec = synthetic_spec(history.path, history.shas[0], "main")
    running, found = prepare_bisect(store, spec, extra=SERVED), prepare_bisect(store, spec, extra=SERVED)
    store.set_status(
        found, BisectStatus.FOUND, finished=utc_now(), first_bad=history.shas[3], last_good=history.shas[2]
    )
    jobs = JobQueue(store)
    jobs.add(found, 0, "/srv/repo", utc_now(), "alice")
    assert jobs.mark_done(found, utc_now())
    db = tmp_path / "bisect.db"
    taken = run_cli("mark", str(running), history.shas[1], "good", db=db)
    assert taken.stdout.endswith("takes the verdict in within a second (if none runs, its server runs it again)\n")
    reopened = run_cli("mark", str(found), history.shas[3], "good", db=db)
    assert reopened.stdout.endswith("is running again; its job is queued again on its server\n"), reopened
    assert jobs.get(found).state is JobState.QUEUED  # its server's next round takes it up
