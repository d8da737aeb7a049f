"""The Store against real SQLite files: round-trips, guards, errors, and several processes at once."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bisector.db import Store
from bisector.db.store import NewStep
from bisector.vocab.commit_range import CommitRange
from bisector.vocab.domain import (
    BisectStatus,
    Commit,
    ErrorKind,
    StepPurpose,
    StepRecord,
    StepResult,
    Verdict,
)
from bisector.vocab.errors import StateError, StoreError, UnknownBisectError

RunPython = Callable[..., subprocess.CompletedProcess[str]]

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
GOOD, BAD = "a" * 40, "b" * 40
SPEC: dict[str, object] = {"run": "python bench.py", "expect": "tflops >= 100", "repeats": 3, "env": {"X": "1"}}


def new_bisect(store: Store, created: datetime = T0, repo: str = "/src/repo") -> int:
    return store.create_bisect(repo, GOOD, BAD, SPEC, created)


def commits(count: int) -> list[Commit]:
    return [
        Commit(
            position=i,
            sha=f"{i:040x}",
            subject=f"Change {i} (#{1000 + i})" if i % 2 else f"Change {i}",
            author=f"Dev {i} <dev{i}@example.com>",
            date=T0 + timedelta(minutes=i),
            pr=1000 + i if i % 2 else None,
        )
        for i in range(count)
    ]


def assert_one_line_naming(message: str, url: str) -> None:
    assert "\n" not in message.strip()
    assert url in message
    assert "Traceback" not in message


# --- bisects -------------------------------------------------------------------------------------


def test_create_and_get_bisect(store: Store) -> None:
    bisect_id = new_bisect(store)
    record = store.get_bisect(bisect_id)
    assert (record.id, record.repo, record.good, record.bad) == (bisect_id, "/src/repo", GOOD, BAD)
    assert record.spec == SPEC
    assert record.status is BisectStatus.RUNNING
    assert record.created == T0
    assert (record.finished, record.first_bad, record.last_good) == (None, None, None)
    assert (record.message, record.extra) == ("", {})


def test_unknown_bisect(store: Store) -> None:
    with pytest.raises(UnknownBisectError, match=rf"^no bisect with id 42 in {re.escape(store.url)}$"):
        store.get_bisect(42)
    for call in (
        lambda: store.set_status(42, BisectStatus.CANCELLED),
        lambda: store.update_extra(42, confidence=0.9),
        lambda: store.change_extra(42, dict),
        lambda: store.add_candidates(42, CommitRange([GOOD, BAD])),
        lambda: store.describe(42, commits(1)),
        lambda: store.candidates(42),
        lambda: store.start_step(42, GOOD, 1, "w", "n", (0,), T0),
        lambda: store.steps(42),
        lambda: store.interrupt_running_steps(42, T0),
    ):
        with pytest.raises(UnknownBisectError):
            call()


def test_list_bisects_newest_first_with_limit(store: Store) -> None:
    ids = [new_bisect(store, created=T0 + timedelta(hours=h)) for h in (2, 0, 1)]
    assert [b.id for b in store.list_bisects()] == [ids[0], ids[2], ids[1]]
    assert [b.id for b in store.list_bisects(limit=2)] == [ids[0], ids[2]]
    assert store.list_bisects(limit=0) == []


def test_set_status_writes_the_given_fields_only(store: Store) -> None:
    bisect_id = new_bisect(store)
    store.set_status(bisect_id, BisectStatus.RUNNING, message="testing 3 of 40")
    store.set_status(bisect_id, BisectStatus.RUNNING, last_good=GOOD)
    record = store.get_bisect(bisect_id)
    assert (record.status, record.message, record.last_good) == (BisectStatus.RUNNING, "testing 3 of 40", GOOD)

    finished = T0 + timedelta(hours=1)
    store.set_status(bisect_id, BisectStatus.FOUND, finished=finished, first_bad=BAD, message="found")
    record = store.get_bisect(bisect_id)
    assert record.status is BisectStatus.FOUND
    assert (record.finished, record.first_bad, record.last_good, record.message) == (finished, BAD, GOOD, "found")


@pytest.mark.parametrize("terminal", [s for s in BisectStatus if s.is_terminal()])
def test_terminal_status_never_changes(store: Store, terminal: BisectStatus) -> None:
    bisect_id = new_bisect(store)
    store.set_status(bisect_id, terminal, finished=T0, message="done")
    for status in BisectStatus:  # RUNNING, another terminal one, and the same one again
        with pytest.raises(StateError, match=f"bisect {bisect_id} is already {terminal.value}"):
            store.set_status(bisect_id, status, message="changed")
    record = store.get_bisect(bisect_id)
    assert (record.status, record.message) == (terminal, "done")


def test_update_extra_merges(store: Store) -> None:
    bisect_id = new_bisect(store)
    store.update_extra(bisect_id, confidence=0.5, suspects=["abc", "def"])
    store.update_extra(bisect_id, confidence=0.97, analysis={"kernels_changed": 2})
    assert store.get_bisect(bisect_id).extra == {
        "confidence": 0.97,
        "suspects": ["abc", "def"],
        "analysis": {"kernels_changed": 2},
    }


def test_change_extra_from_many_stores_at_once_keeps_every_change(store: Store, store_url: str) -> None:
    """Each writer adds its own entries under one key (as reruns register): a read-then-write outside the row's lock
    would drop some of them."""
    bisect_id = new_bisect(store)
    store.update_extra(bisect_id, confidence=0.5)

    def entry_added(name: str, n: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda extra: {**extra, "e": {**extra.get("e", {}), name: n}}

    def add_entries(writer: int) -> None:
        with Store.open(store_url) as own:
            for n in range(10):
                before = own.change_extra(bisect_id, entry_added(f"{writer}-{n}", n))
                assert f"{writer}-{n}" not in before.get("e", {})

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(add_entries, range(4)))
    extra = store.get_bisect(bisect_id).extra
    assert extra == {"confidence": 0.5, "e": {f"{w}-{n}": n for w in range(4) for n in range(10)}}


def test_update_extra_refuses_values_that_are_not_json(store: Store) -> None:
    bisect_id = new_bisect(store)
    with pytest.raises(TypeError):
        store.update_extra(bisect_id, when=T0)
    assert store.get_bisect(bisect_id).extra == {}


# --- datetimes -----------------------------------------------------------------------------------


def test_aware_datetimes_come_back_in_utc(store: Store) -> None:
    tokyo = timezone(timedelta(hours=9))
    created = datetime(2025, 6, 1, 9, 30, 0, 123456, tzinfo=tokyo)
    bisect_id = new_bisect(store, created=created)
    stored = store.get_bisect(bisect_id).created
    assert stored == created
    assert stored.tzinfo is UTC
    assert stored.hour == 0


def test_naive_datetimes_are_refused(store: Store) -> None:
    naive = datetime(2025, 1, 1, 12, 0)
    with pytest.raises(ValueError, match="naive datetime"):
        new_bisect(store, created=naive)
    bisect_id = new_bisect(store)
    with pytest.raises(ValueError, match="naive datetime"):
        store.set_status(bisect_id, BisectStatus.FOUND, finished=naive)
    assert store.get_bisect(bisect_id).status is BisectStatus.RUNNING


def test_newest_first_across_time_zones(store: Store) -> None:
    # 10:00 at UTC+9 is earlier than 02:00 UTC the same day: ordering follows the instant.
    earlier = new_bisect(store, created=datetime(2025, 1, 1, 10, 0, tzinfo=timezone(timedelta(hours=9))))
    later = new_bisect(store, created=datetime(2025, 1, 1, 2, 0, tzinfo=UTC))
    assert [b.id for b in store.list_bisects()] == [later, earlier]


# --- candidates ----------------------------------------------------------------------------------


def test_candidates_round_trip_with_the_details_of_the_described_ones(store: Store) -> None:
    bisect_id = new_bisect(store)
    history = commits(7)
    shown = [history[0], history[3], history[6]]
    store.add_candidates(bisect_id, CommitRange([c.sha for c in history], shown))
    stored = store.candidates(bisect_id)
    assert stored.shas() == [c.sha for c in history]
    assert stored.described() == shown
    assert stored[3] == history[3]
    assert stored[2] == Commit(2, history[2].sha)  # not described: its SHA and position only
    assert not stored[2].described
    assert (stored.commit(history[5].sha), stored.commit("f" * 40)) == (Commit(5, history[5].sha), None)
    assert len(store.candidates(new_bisect(store))) == 0


def test_candidates_are_all_or_nothing(store: Store) -> None:
    bisect_id = new_bisect(store)
    history = commits(5)
    naive = replace(history[4], date=datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="naive datetime"):
        store.add_candidates(bisect_id, CommitRange([c.sha for c in history], [history[0], naive]))
    assert len(store.candidates(bisect_id)) == 0


def test_100000_candidates_and_a_merged_branch_after_them(store: Store) -> None:
    bisect_id = new_bisect(store)
    shas = [f"{i:040x}" for i in range(100_000)]
    candidates = CommitRange(shas)
    store.add_candidates(bisect_id, candidates)
    branch = [f"{i:040x}" for i in range(10**6, 10**6 + 3)]
    candidates.extend(branch)
    store.add_candidates(bisect_id, candidates, first_position=len(shas))
    stored = store.candidates(bisect_id)
    assert stored.shas() == shas + branch
    assert (stored.position[shas[-1]], stored.position[branch[0]]) == (99_999, 100_000)


def test_describe_stores_the_details_once(store: Store) -> None:
    bisect_id = new_bisect(store)
    history = commits(6)
    store.add_candidates(bisect_id, CommitRange([c.sha for c in history], [history[0]]))
    store.describe(bisect_id, [history[2], replace(history[0], subject="changed"), Commit(4, history[4].sha)])
    store.describe(bisect_id, [history[2]])
    assert store.candidates(bisect_id).described() == [history[0], history[2]]


# --- steps ---------------------------------------------------------------------------------------


def test_start_step_is_running(store: Store) -> None:
    bisect_id = new_bisect(store)
    step_id = store.start_step(bisect_id, GOOD, 1, "local-0", "host-a", (0, 1), T0)
    assert store.steps(bisect_id) == [
        StepRecord(
            id=step_id,
            bisect_id=bisect_id,
            sha=GOOD,
            attempt=1,
            worker="local-0",
            node="host-a",
            gpus=(0, 1),
            started=T0,
            finished=None,
            build_s=None,
            run_s=None,
            exit_code=None,
            verdict=None,
            samples=(),
            log_path="",
            error_kind=None,
            detail="",
        )
    ]


def test_start_steps_records_a_round_in_one_transaction(store: Store) -> None:
    bisect_id = new_bisect(store)
    new = [
        NewStep(GOOD, 1, "local-0", T0),
        NewStep(BAD, 1, "local-1", T0, StepPurpose.CONFIRM, "host-b", (3,)),
        NewStep(GOOD, 2, "local-2", T0),
    ]
    ids = store.start_steps(bisect_id, new)
    assert ids == sorted(ids)
    assert len(set(ids)) == 3
    stored = store.steps(bisect_id)
    assert [(s.id, s.sha, s.attempt, s.worker, s.purpose) for s in stored] == [
        (ids[0], GOOD, 1, "local-0", StepPurpose.SEARCH),
        (ids[1], BAD, 1, "local-1", StepPurpose.CONFIRM),
        (ids[2], GOOD, 2, "local-2", StepPurpose.SEARCH),
    ]
    assert (stored[1].node, stored[1].gpus, stored[1].verdict) == ("host-b", (3,), None)
    assert store.start_steps(bisect_id, []) == []
    with pytest.raises(UnknownBisectError):
        store.start_steps(bisect_id + 1, new)
    assert len(store.steps(bisect_id)) == 3


def test_finish_step_writes_the_result(store: Store) -> None:
    bisect_id = new_bisect(store)
    step_id = store.start_step(bisect_id, BAD, 2, "pending", "?", (), T0)
    result = StepResult(
        step_id=step_id,
        sha=BAD,
        verdict=Verdict.BAD,
        samples=(101.5, 99.25, 80.0),
        exit_code=0,
        build_s=12.5,
        run_s=3.25,
        detail="tflops 80.0 < 100",
        log_path="/logs/1/bbbb-2.log",
        worker="ray-actor-7",
        node="gpu-node-3",
        gpus=(4, 5),
    )
    finished = T0 + timedelta(seconds=16)
    store.finish_step(step_id, result, finished)
    [step] = store.steps(bisect_id)
    assert (step.worker, step.node, step.gpus) == ("ray-actor-7", "gpu-node-3", (4, 5))
    assert (step.verdict, step.samples, step.metric) == (Verdict.BAD, (101.5, 99.25, 80.0), 80.0)
    assert (step.exit_code, step.build_s, step.run_s) == (0, 12.5, 3.25)
    assert (step.detail, step.log_path, step.error_kind) == ("tflops 80.0 < 100", "/logs/1/bbbb-2.log", None)
    assert (step.started, step.finished, step.attempt) == (T0, finished, 2)


def test_finish_step_keeps_worker_node_gpus_when_the_result_has_none(store: Store) -> None:
    bisect_id = new_bisect(store)
    step_id = store.start_step(bisect_id, GOOD, 1, "local-1", "host-a", (1,), T0)
    store.finish_step(
        step_id,
        StepResult(step_id, GOOD, Verdict.ERROR, error_kind=ErrorKind.TIMEOUT, detail="timeout after 600 s"),
        T0,
    )
    [step] = store.steps(bisect_id)
    assert (step.worker, step.node, step.gpus) == ("local-1", "host-a", (1,))
    assert (step.verdict, step.error_kind, step.detail) == (Verdict.ERROR, ErrorKind.TIMEOUT, "timeout after 600 s")


def test_finished_step_is_not_overwritten(store: Store) -> None:
    bisect_id = new_bisect(store)
    step_id = store.start_step(bisect_id, GOOD, 1, "w", "n", (0,), T0)
    store.finish_step(step_id, StepResult(step_id, GOOD, Verdict.GOOD, samples=(1.0,)), T0)
    with pytest.raises(StateError, match=f"step {step_id} .* already has the verdict good"):
        store.finish_step(step_id, StepResult(step_id, GOOD, Verdict.BAD), T0)
    assert store.steps(bisect_id)[0].verdict is Verdict.GOOD


def test_finish_steps_writes_a_batch_and_refuses_only_the_finished_one(store: Store) -> None:
    bisect_id = new_bisect(store)
    first, second, third = (store.start_step(bisect_id, GOOD, i, "w", "n", (), T0) for i in (1, 2, 3))
    store.finish_step(second, StepResult(second, GOOD, Verdict.GOOD), T0)
    batch = [(step_id, StepResult(step_id, GOOD, Verdict.BAD), T0) for step_id in (first, second, third)]
    with pytest.raises(StateError, match=f"step {second} .* already has the verdict good"):
        store.finish_steps(batch)
    assert [s.verdict for s in store.steps(bisect_id)] == [Verdict.BAD, Verdict.GOOD, Verdict.BAD]


def test_finish_step_of_unknown_step_or_mismatched_result(store: Store) -> None:
    with pytest.raises(StoreError, match=rf"no step with id 99 in {re.escape(store.url)}"):
        store.finish_step(99, StepResult(99, GOOD, Verdict.GOOD), T0)
    with pytest.raises(ValueError, match="result of step 3 given for step 4"):
        store.finish_step(4, StepResult(3, GOOD, Verdict.GOOD), T0)


def test_steps_are_ordered_by_id_and_per_bisect(store: Store) -> None:
    first, second = new_bisect(store), new_bisect(store)
    ids = [store.start_step(first, f"{i:040x}", 1, f"w{i}", "n", (i,), T0 - timedelta(seconds=i)) for i in range(4)]
    other = store.start_step(second, GOOD, 1, "w", "n", (0,), T0)
    assert [s.id for s in store.steps(first)] == ids
    assert [s.id for s in store.steps(second)] == [other]
    assert store.steps(new_bisect(store)) == []


def test_interrupt_running_steps(store: Store) -> None:
    bisect_id, other = new_bisect(store), new_bisect(store)
    done = store.start_step(bisect_id, GOOD, 1, "w0", "n", (0,), T0)
    store.finish_step(done, StepResult(done, GOOD, Verdict.GOOD), T0)
    running = [store.start_step(bisect_id, BAD, attempt, "w1", "n", (1,), T0) for attempt in (1, 2)]
    elsewhere = store.start_step(other, BAD, 1, "w2", "n", (2,), T0)
    finished = T0 + timedelta(minutes=5)

    assert store.interrupt_running_steps(bisect_id, finished) == 2
    assert store.interrupt_running_steps(bisect_id, finished) == 0

    by_id = {step.id: step for step in store.steps(bisect_id)}
    assert by_id[done].verdict is Verdict.GOOD
    for step_id in running:
        step = by_id[step_id]
        assert (step.verdict, step.error_kind) == (Verdict.ERROR, ErrorKind.INTERRUPTED)
        assert (step.detail, step.finished) == ("coordinator stopped while the step ran", finished)
    assert store.steps(other)[0].id == elsewhere
    assert store.steps(other)[0].verdict is None
    with pytest.raises(StateError):  # a late result of an interrupted step is not written
        store.finish_step(running[0], StepResult(running[0], BAD, Verdict.BAD), T0)


def test_interrupted_steps_end_when_their_coordinator_was_last_seen_or_at_their_start(store_url: str) -> None:
    """A step left running by a coordinator gone since its last heartbeat ends then; one it started after that
    heartbeat ends at its start, never before it (a negative time)."""
    with Store.open(store_url) as store:
        bisect_id = new_bisect(store)
        early = store.start_step(bisect_id, GOOD, 1, "w0", "n", (0,), T0)
        late = store.start_step(bisect_id, BAD, 1, "w1", "n", (1,), T0 + timedelta(seconds=7))
        assert store.interrupt_running_steps(bisect_id, T0 + timedelta(seconds=5)) == 2
        ended = {step.id: step.finished for step in store.steps(bisect_id)}
        assert ended == {early: T0 + timedelta(seconds=5), late: T0 + timedelta(seconds=7)}


def test_dead_reruns_steps_end_when_their_rerun_was_last_seen_or_at_their_start(store_url: str) -> None:
    """Each commit's running rerun steps end at the time given for that commit (a step started after it: at its start);
    the other steps keep running."""
    with Store.open(store_url) as store:
        bisect_id = new_bisect(store)
        early = store.start_step(bisect_id, GOOD, 1, "w0", "n", (0,), T0, StepPurpose.RERUN)
        late = store.start_step(bisect_id, BAD, 1, "w1", "n", (1,), T0 + timedelta(seconds=7), StepPurpose.RERUN)
        search = store.start_step(bisect_id, GOOD, 1, "w2", "n", (2,), T0)
        last_seen = {GOOD: T0 + timedelta(seconds=5), BAD: T0 + timedelta(seconds=3)}
        assert store.interrupt_reruns(bisect_id, lambda extra: (extra, last_seen)) == 2
        ended = {step.id: step.finished for step in store.steps(bisect_id)}
        assert ended == {early: T0 + timedelta(seconds=5), late: T0 + timedelta(seconds=7), search: None}


finite = st.floats(allow_nan=False, allow_infinity=False)
# Fixed offsets: a zoneinfo time inside a DST gap compares unequal to every other zone's (PEP 495).
aware_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(2200, 1, 1),
    timezones=st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)).map(timezone),
)
results = st.builds(
    StepResult,
    step_id=st.just(0),
    sha=st.just(BAD),
    verdict=st.sampled_from(Verdict),
    samples=st.lists(finite, max_size=8).map(tuple),
    exit_code=st.none() | st.integers(-(2**31), 2**31 - 1),
    build_s=finite,
    run_s=finite,
    error_kind=st.none() | st.sampled_from(ErrorKind),
    detail=st.text(),
    log_path=st.text(),
    worker=st.text(max_size=20),
    node=st.text(max_size=20),
    gpus=st.lists(st.integers(0, 1023), max_size=8).map(tuple),
)


def nul(text: str) -> str:
    """What the store keeps of text: NUL characters become U+FFFD (PostgreSQL cannot store them)."""
    return text.replace("\x00", "\ufffd")


def test_finish_step_round_trips_any_result(store: Store) -> None:
    bisect_id = new_bisect(store)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(result=results, finished=aware_datetimes)
    def round_trip(result: StepResult, finished: datetime) -> None:
        step_id = store.start_step(bisect_id, BAD, 1, "start-worker", "start-node", (7,), T0)
        store.finish_step(step_id, replace(result, step_id=step_id), finished)
        step = next(s for s in store.steps(bisect_id) if s.id == step_id)
        assert step.verdict == result.verdict
        assert step.samples == result.samples
        assert (step.exit_code, step.build_s, step.run_s) == (result.exit_code, result.build_s, result.run_s)
        assert (step.error_kind, step.detail, step.log_path) == (
            result.error_kind,
            nul(result.detail),
            nul(result.log_path),
        )
        assert step.worker == (nul(result.worker) or "start-worker")
        assert step.node == (nul(result.node) or "start-node")
        assert step.gpus == (result.gpus or (7,))
        assert step.finished == finished
        assert step.finished is not None
        assert step.finished.tzinfo is UTC

    round_trip()


# --- opening, closing, failures --------------------------------------------------------------------


def test_open_with_default_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("BISECT_DB", raising=False)
    monkeypatch.setenv("BISECT_DATA_DIR", str(tmp_path / "state"))
    with Store.open() as store:
        assert store.url == f"sqlite:///{tmp_path}/state/bisect.db"
        new_bisect(store)
    assert (tmp_path / "state" / "bisect.db").is_file()


def test_bisect_db_selects_the_database(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BISECT_DB", f"sqlite:///{tmp_path}/elsewhere.db")
    with Store.open() as store:
        new_bisect(store)
    assert (tmp_path / "elsewhere.db").is_file()


def test_a_store_file_has_one_identity_however_it_is_opened(tmp_path: Path) -> None:
    """The identity names the store's log folder: a read-only open (list, show, the dashboard) must find the same
    logs as the coordinator that wrote them, whatever path reached the file."""
    (tmp_path / "sub").mkdir()
    with Store.open(f"sqlite:///{tmp_path / 'bisect.db'}") as written:
        new_bisect(written)
        identity = written.identity
    for url in (f"sqlite:///{tmp_path / 'sub' / '..' / 'bisect.db'}", str(tmp_path / "bisect.db")):
        for read_only in (False, True):
            with Store.open(url, read_only=read_only) as store:
                assert store.identity == identity == f"sqlite:{tmp_path / 'bisect.db'}"


def test_in_memory_store_is_one_database_for_all_threads() -> None:
    with Store.open("sqlite://") as store, ThreadPoolExecutor(max_workers=1) as pool:
        bisect_id = new_bisect(store)
        assert pool.submit(store.get_bisect, bisect_id).result().spec == SPEC


def test_closed_store_refuses_work(db_url: str) -> None:
    store = Store.open(db_url)
    store.close()
    store.close()
    with pytest.raises(StoreError, match="is closed"):
        store.list_bisects()


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("://not a url", "Could not parse"),  # a string without :// is a file path (db_url)
        ("nosuchdb://host/db", "nosuchdb"),
        ("postgresql://bisect:s3cret@127.0.0.1:1/bisect", ""),  # no driver, or no server: either way one line
    ],
)
def test_bad_urls_are_one_line_store_errors(url: str, cause: str) -> None:
    with pytest.raises(StoreError) as raised:
        Store.open(url)
    message = str(raised.value)
    assert "s3cret" not in message
    assert_one_line_naming(message, url.replace("s3cret", "***"))
    assert cause in message


def test_path_under_a_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("")
    url = f"sqlite:///{tmp_path}/plain-file/sub/bisect.db"
    with pytest.raises(StoreError, match="Not a directory") as raised:
        Store.open(url)
    assert_one_line_naming(str(raised.value), url)


def test_read_only_connection_is_refused_at_open(db_url: str) -> None:
    Store.open(db_url).close()
    url = f"sqlite:///file:{db_url.removeprefix('sqlite:///')}?mode=ro&uri=true"
    with pytest.raises(StoreError, match="readonly") as raised:
        Store.open(url)
    assert_one_line_naming(str(raised.value), url)


OPEN_AND_REPORT = """
    import sys
    from bisector.vocab.errors import StoreError
    from bisector.db import Store
    try:
        Store.open(sys.argv[1]).close()
    except StoreError as exc:
        print(exc)
        sys.exit(exc.exit_code)
"""


def test_unwritable_directory_is_a_store_error(tmp_path: Path, run_python: RunPython) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        for url in (f"sqlite:///{locked}/bisect.db", f"sqlite:///{locked}/sub/bisect.db"):
            child = run_python(OPEN_AND_REPORT, url, honor_permissions=True)
            assert (child.returncode, child.stderr) == (2, ""), child.stderr
            assert_one_line_naming(child.stdout, url)
            assert "cannot open the store" in child.stdout
    finally:
        locked.chmod(0o755)


def test_read_only_database_file_is_a_store_error(db_url: str, run_python: RunPython) -> None:
    with Store.open(db_url) as store:
        new_bisect(store)
    path = Path(db_url.removeprefix("sqlite:///"))
    path.chmod(0o444)
    child = run_python(OPEN_AND_REPORT, db_url, honor_permissions=True)
    assert (child.returncode, child.stderr) == (2, ""), child.stderr
    assert_one_line_naming(child.stdout, db_url)
    assert "readonly" in child.stdout or "unable to open" in child.stdout


# --- several processes on one file -------------------------------------------------------------------

CANCEL_FROM_ANOTHER_PROCESS = """
    import json, sys
    from datetime import UTC, datetime
    from bisector.vocab.domain import BisectStatus
    from bisector.db import Store
    with Store.open(sys.argv[1]) as store:
        bisect_id = int(sys.argv[2])
        record = store.get_bisect(bisect_id)
        steps = store.steps(bisect_id)
        store.set_status(bisect_id, BisectStatus.CANCELLED, finished=datetime.now(UTC), message="cancelled by op")
        print(json.dumps({"status": record.status, "steps": [s.id for s in steps], "running": steps[0].verdict}))
"""


def test_another_process_reads_and_cancels_while_the_coordinator_holds_the_file(
    sqlite_store: Store, run_python: RunPython
) -> None:
    store = sqlite_store  # several processes share one SQLite file
    bisect_id = new_bisect(store)
    step_id = store.start_step(bisect_id, BAD, 1, "w", "n", (0,), T0)
    store.list_bisects()  # the coordinator's pool holds an open connection to the file

    child = run_python(CANCEL_FROM_ANOTHER_PROCESS, store.url, str(bisect_id))

    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == {"status": "running", "steps": [step_id], "running": None}
    record = store.get_bisect(bisect_id)
    assert (record.status, record.message) == (BisectStatus.CANCELLED, "cancelled by op")
    with pytest.raises(StateError, match="already cancelled"):
        store.set_status(bisect_id, BisectStatus.FOUND, first_bad=BAD)
    store.finish_step(step_id, StepResult(step_id, BAD, Verdict.CANCELLED), T0)  # steps can still finish


WRITE_WHEN_TOLD = """
    import sys, time
    from bisector.vocab.domain import BisectStatus
    from bisector.db import Store
    with Store.open(sys.argv[1]) as store:
        print("opened", flush=True)
        sys.stdin.readline()
        started = time.monotonic()
        store.set_status(int(sys.argv[2]), BisectStatus.RUNNING, message="written after the lock")
        print(f"waited {time.monotonic() - started:.1f}", flush=True)
"""


def start_python(code: str, *args: str, stdin: int | None = None, stdout: int | None = None) -> subprocess.Popen[str]:
    """Start code in another Python process; its stderr is piped."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
        stdin=stdin,
        stdout=stdout,
        stderr=subprocess.PIPE,
    )


def test_a_writer_waits_for_the_lock_instead_of_failing(sqlite_store: Store) -> None:
    store = sqlite_store  # several processes share one SQLite file
    bisect_id = new_bisect(store)
    child = start_python(WRITE_WHEN_TOLD, store.url, str(bisect_id), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    holder = sqlite3.connect(store.url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        assert child.stdin is not None
        assert child.stdout is not None
        assert child.stdout.readline() == "opened\n"
        holder.execute("BEGIN IMMEDIATE")  # another process is writing
        child.stdin.write("go\n")
        child.stdin.flush()
        time.sleep(1.5)
        assert child.poll() is None, "the writer gave up instead of waiting"
        holder.execute("COMMIT")
        out, err = child.communicate(timeout=60)
    finally:
        holder.close()
        if child.poll() is None:
            child.kill()
        child.communicate()
    assert child.returncode == 0, err
    assert float(out.split()[-1]) >= 1.0
    assert store.get_bisect(bisect_id).message == "written after the lock"


START_STEPS = """
    import sys
    from datetime import UTC, datetime
    from bisector.db import Store
    with Store.open(sys.argv[1]) as store:
        for i in range(int(sys.argv[3])):
            store.start_step(int(sys.argv[2]), "c" * 40, i, sys.argv[4], "node", (0,), datetime.now(UTC))
"""


def test_concurrent_writers_lose_nothing(sqlite_store: Store) -> None:
    store = sqlite_store  # several processes share one SQLite file
    bisect_id = new_bisect(store)
    workers = [start_python(START_STEPS, store.url, str(bisect_id), "40", f"p{n}") for n in range(3)]
    for i in range(40):
        store.start_step(bisect_id, GOOD, i, "coordinator", "node", (1,), T0)
    errors = [worker.communicate(timeout=120)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0, 0], errors
    steps = store.steps(bisect_id)
    assert len(steps) == 160
    assert sorted({s.worker for s in steps}) == ["coordinator", "p0", "p1", "p2"]


KILLED_COORDINATOR = """
    import os, signal, sys
    from datetime import UTC, datetime
    from bisector.vocab.domain import StepResult, Verdict
    from bisector.db import Store
    store = Store.open(sys.argv[1])
    bisect_id = store.create_bisect("/src/repo", "a" * 40, "b" * 40, {}, datetime.now(UTC))
    done = store.start_step(bisect_id, "a" * 40, 1, "w0", "n", (0,), datetime.now(UTC))
    store.finish_step(done, StepResult(done, "a" * 40, Verdict.GOOD), datetime.now(UTC))
    store.start_step(bisect_id, "b" * 40, 1, "w1", "n", (1,), datetime.now(UTC))
    store.update_extra(bisect_id, confidence=0.5)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_every_write_survives_kill_9(db_url: str, run_python: RunPython) -> None:
    child = run_python(KILLED_COORDINATOR, db_url)
    assert child.returncode == -9, child.stderr
    with Store.open(db_url) as store:
        [record] = store.list_bisects()
        assert record.extra == {"confidence": 0.5}
        assert [s.verdict for s in store.steps(record.id)] == [Verdict.GOOD, None]
        assert store.interrupt_running_steps(record.id, datetime.now(UTC)) == 1


CREATE_ONE = """
    import sys
    from datetime import UTC, datetime
    from bisector.db import Store
    with Store.open(sys.argv[1]) as store:
        store.create_bisect("/src/repo", "a" * 40, "b" * 40, {}, datetime.now(UTC))
"""


def test_processes_opening_a_new_file_at_once_migrate_it_once(db_url: str) -> None:
    children = [start_python(CREATE_ONE, db_url) for _ in range(4)]
    errors = [child.communicate(timeout=120)[1] for child in children]
    assert [child.returncode for child in children] == [0, 0, 0, 0], errors
    with Store.open(db_url) as store:
        assert len(store.list_bisects()) == 4


def test_findings_round_trip_and_replace_by_kind(store: Store) -> None:
    bisect_id = store.create_bisect("repo", "g" * 40, "b" * 40, {}, T0)
    table_row = {"kind": "table_entry", "file": "kernels/tiny_gemm.py", "name": "_TUNED_MMA_MIN_M",
                 "key": "[(144, 7168)]", "before": None, "after": "2", "line": 40, "detail": ""}  # fmt: skip
    dispatch_row = {"kind": "dispatch", "file": "", "name": "tiny_gemm", "key": "(144, 7168) m=4",
                    "before": "simt", "after": "mma", "line": None, "detail": "count=3"}  # fmt: skip
    store.replace_findings(bisect_id, ["table_entry"], [table_row])
    store.replace_findings(bisect_id, ["dispatch"], [dispatch_row])
    assert store.findings(bisect_id) == [table_row, dispatch_row]
    store.replace_findings(bisect_id, ["dispatch"], [])
    assert store.findings(bisect_id) == [table_row]
