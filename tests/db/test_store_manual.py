"""Manual steps (a person's verdicts), reopening a finished bisect, and opening a store read-only."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bisector.db import Store
from bisector.vocab.domain import BisectStatus, StepPurpose, Verdict
from bisector.vocab.errors import StateError, StoreError

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_manual_steps_are_finished_steps_a_coordinator_reads_after_an_id(store: Store) -> None:
    bisect_id = store.create_bisect("/src/repo", "a" * 40, "b" * 40, {"run": "true"}, T0)
    first = store.add_manual_step(bisect_id, "c" * 40, Verdict.BAD, "marked bad by ann: slow", T0)
    second = store.add_manual_step(bisect_id, "c" * 40, Verdict.GOOD, "marked good by bob", T0)
    steps = store.steps(bisect_id)
    assert [(s.purpose, s.verdict, s.attempt, s.detail) for s in steps] == [
        (StepPurpose.MANUAL, Verdict.BAD, 1, "marked bad by ann: slow"),
        (StepPurpose.MANUAL, Verdict.GOOD, 2, "marked good by bob"),
    ]
    assert all(s.finished == T0 and s.worker == "" for s in steps)
    assert [s.id for s in store.manual_steps(bisect_id)] == [first, second]
    assert [s.id for s in store.manual_steps(bisect_id, after_id=first)] == [second]
    with pytest.raises(ValueError, match="good, bad or skip"):
        store.add_manual_step(bisect_id, "c" * 40, Verdict.ERROR, "", T0)


def test_reopen_only_from_the_status_the_caller_saw(store: Store) -> None:
    bisect_id = store.create_bisect("/src/repo", "a" * 40, "b" * 40, {"run": "true"}, T0)
    store.set_status(bisect_id, BisectStatus.FOUND, finished=T0, first_bad="c" * 40, last_good="a" * 40)
    store.reopen(bisect_id, BisectStatus.FOUND, "reopened: a mark changed the answer")
    record = store.get_bisect(bisect_id)
    assert (record.status, record.finished, record.first_bad, record.message) == (
        BisectStatus.RUNNING, None, None, "reopened: a mark changed the answer"
    )  # fmt: skip
    with pytest.raises(StateError, match="is running now, not found"):
        store.reopen(bisect_id, BisectStatus.FOUND, "twice")


def test_a_read_only_open_of_a_store_at_head_writes_nothing(db_url: str, tmp_path) -> None:
    with Store.open(db_url) as store:
        store.create_bisect("/src/repo", "a" * 40, "b" * 40, {"run": "true"}, T0)
    path = tmp_path / "data" / "bisect.db"
    before = path.read_bytes()
    with Store.open(db_url, read_only=True) as reader:
        assert reader.get_bisect(1).repo == "/src/repo"
        with pytest.raises(StoreError, match=r"readonly database"):
            reader.create_bisect("/src/other", "a" * 40, "b" * 40, {}, T0)
    assert path.read_bytes() == before
