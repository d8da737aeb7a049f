"""Images built ahead of their steps at several workers: the coordinator on a synthetic history, local worker
processes, real image builds and a real store."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from bisect_helpers import processes_with, synthetic_spec
from synthetic import culprit_history

from bisector.core.records import SearchRecords
from bisector.db.store import Store
from bisector.report.json_report import report_json
from bisector.report.model import BisectReport
from bisector.runner.coordinator import Coordinator
from bisector.runner.observer import SilentObserver
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus
from bisector.workers.build_ahead import BUILD_WORKER
from bisector.workers.images.cache import images_root

WORKERS = 3
EVERY_WAY = WORKERS * (WORKERS + 1)  # the next round for each of the 4 ways a round of 3 probes ends
# Each build logs who made it. A build ahead then waits until the builds ahead of the 3 ways the first round did
# not end have been stopped (each says so in STOPPED as it is: its trap is set before it logs, so that one stopped
# as soon as it logged says so too), so that they are still running when its results come, and those of the way it
# did end finish only after that. The loops' bounds are safety nets.
BUILD = f"""if [ "$BISECT_WORKER" = {BUILD_WORKER} ]; then  # TOKEN
  trap 'echo "$(cat counter.txt)" >> "$STOPPED"; exit 1' TERM
fi
echo "$BISECT_WORKER $(cat counter.txt)" >> "$BUILD_LOG"
if [ "$BISECT_WORKER" = {BUILD_WORKER} ]; then
  for i in $(seq 3000); do
    [ "$(cat "$STOPPED" 2>/dev/null | wc -l)" -ge {EVERY_WAY - WORKERS} ] && break; sleep 0.1
  done
fi"""
# The first round's tests end once every build ahead of the next round has begun (its own 3 builds and 12 more).
RUN = (
    f'for i in $(seq 3000); do [ "$(wc -l < "$BUILD_LOG")" -ge {WORKERS + EVERY_WAY} ] && break; sleep 0.1; done; '
    "bash test.sh"
)


class Notes(SilentObserver):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def test_at_several_workers_the_next_round_is_built_ahead_for_every_way_and_the_others_stopped(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("BISECT_BUILD_AHEAD_SLOTS", str(EVERY_WAY))  # a host with room for all of them at once
    history = culprit_history(tmp_path / "repo", 40, 23)
    build_log, stopped = tmp_path / "builds", tmp_path / "stopped"
    spec = synthetic_spec(
        history.path, history.shas[0], history.shas[-1], workers=WORKERS, executor="local", image="venv",
        build=BUILD.replace("TOKEN", str(tmp_path)), run=RUN,
        env={"BUILD_LOG": str(build_log), "STOPPED": str(stopped)},
    )  # fmt: skip
    assert spec.executor.build_ahead_limit() == EVERY_WAY  # the default, not asked for
    observer = Notes()
    record = Coordinator(store, make_executor, observer=observer, poll_interval_s=0.05).start(spec)

    assert (record.status, record.first_bad) == (BisectStatus.FOUND, history.shas[23])
    report: dict[str, Any] = report_json(BisectReport.load(store, record.id))
    steps = sorted(report["steps"], key=lambda step: step["id"])
    first_round, later = steps[:WORKERS], steps[WORKERS:]
    assert all(step["image"]["source"] == "built" for step in first_round)  # nothing ran before them
    built_ahead = SearchRecords.from_extra(record.extra).built_ahead
    # The next round probes the part of the range the first round's results leave. A worker freed by one of those
    # results may probe elsewhere before the others come (cancelled once they make its probe irrelevant), and a
    # probe of the next round may be cancelled by another's result before it reports an image.
    ended = {step["position"]: step["verdict"] for step in first_round}
    last_good = max((at for at, verdict in ended.items() if verdict == "good"), default=0)
    first_bad = min((at for at, verdict in ended.items() if verdict == "bad"), default=len(history.shas) - 1)
    next_round = [step for step in later if last_good < step["position"] < first_bad]
    sources = [(step["verdict"], step["image"] and step["image"]["source"]) for step in next_round]
    assert all(source == "cache" or (verdict, source) == ("cancelled", None) for verdict, source in sources), sources
    assert any(verdict != "cancelled" for verdict, _ in sources), sources
    assert {step["sha"] for step in next_round} <= set(built_ahead)  # its images were the builds ahead

    builds = [line.split() for line in build_log.read_text().splitlines()]
    ahead = [int(index) for who, index in builds if who == BUILD_WORKER]
    assert len(ahead) >= EVERY_WAY
    assert len(ahead) == len(set(ahead))  # each commit built ahead once
    stopped_commits = {history.shas[int(line)] for line in stopped.read_text().splitlines()}
    assert len(stopped_commits) >= EVERY_WAY - WORKERS  # the 3 ways the first round did not end, at the least
    manifests = [json.loads(p.read_text()) for p in images_root().glob("*/manifest.json")]
    assert not {m["sha"] for m in manifests} & stopped_commits  # a stopped build leaves no image
    assert {m["status"] for m in manifests} == {"ready"}
    assert not processes_with(str(tmp_path))  # every build ahead ended with the bisect
    logs = list((tmp_path / "bisect-home").rglob("build-ahead-*.log"))
    assert len(logs) == len(ahead)
    pids = {re.search(r"ahead of its step \(pid (\d+)\)", log.read_text())[1] for log in logs}  # type: ignore[index]
    assert len(pids) == 1  # one process for the bisect's builds ahead: one interpreter's start, not one per build
    tested = {step["sha"] for step in later if step["verdict"] in ("good", "bad", "measured", "skip")}
    tested_ahead = len(tested & set(built_ahead))
    note = next(n for n in observer.notes if n.startswith("images built ahead of their steps this run"))
    told = re.fullmatch(r".*: (\d+), (\d+) of them then tested; (\d+) build\(s\) stopped once .*", note)
    assert told is not None, note
    assert (int(told[1]), int(told[2])) == (len(built_ahead), tested_ahead)
    assert int(told[3]) >= len(stopped_commits)  # and those stopped before their command began
