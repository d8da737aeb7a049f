"""Two PostgreSQL transactions on one bisect's steps at once, each store in its own thread: the order they lock
rows in, and what each counts. Each race is forced, not hoped for: a transaction is held open until the other
one waits on a lock (pg_stat_activity says so). SQLite takes its write lock at BEGIN: it cannot interleave them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from postgres_helpers import fresh_postgres_database
from sqlalchemy import text

from bisector.db import Store
from bisector.vocab.domain import StepResult, Verdict
from bisector.vocab.errors import StateError

pytestmark = pytest.mark.postgres

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
SHA = "c" * 40
HANG_GUARD_S = 120.0  # only against a hang: every wait below ends when the other thread acts


@pytest.fixture
def stores() -> Iterator[tuple[Store, Store, Store]]:
    """Three stores on one fresh PostgreSQL database: each thread's own, and the test's."""
    with fresh_postgres_database() as url, Store.open(url) as a, Store.open(url) as b, Store.open(url) as watcher:
        yield a, b, watcher


def wait_for_lock_waiter(watcher: Store, worker: Future[Any]) -> None:
    """Until a transaction of this database waits on a row lock (or the worker ended without waiting)."""
    query = text(
        "select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + HANG_GUARD_S
    while not worker.done():
        with watcher.reading() as conn:
            if conn.execute(query).scalar():
                return
        assert time.monotonic() < deadline, "no transaction came to wait on a lock"
        time.sleep(0.05)


def device_s(store: Store, bisect_id: int) -> float:
    with store.reading() as conn:
        return float(conn.execute(text("select device_s from bisects where id = :id"), {"id": bisect_id}).scalar_one())


def paused_until(locked: threading.Event, go_on: threading.Event) -> Callable[[dict[str, Any]], tuple[str, ...]]:
    """A spared_reruns for Store.interrupt_running_steps that holds its transaction (the bisect's row locked)
    until go_on."""

    def spared(extra: dict[str, Any]) -> tuple[str, ...]:
        locked.set()
        assert go_on.wait(HANG_GUARD_S)
        return ()

    return spared


def test_finishing_a_step_while_its_bisect_s_steps_are_interrupted_cannot_deadlock(
    stores: tuple[Store, Store, Store],
) -> None:
    """The interrupt holds the bisect's row; the step's result waits for it before touching the step, so the
    interrupt goes on and the late result is refused as any result of an interrupted step: a StateError, never
    the StoreError of a transaction PostgreSQL aborted to break a deadlock."""
    finisher, interrupter, watcher = stores
    bisect_id = watcher.create_bisect("/src/repo", "a" * 40, SHA, {}, T0)
    step = watcher.start_step(bisect_id, SHA, 1, "w0", "n", (0,), T0)
    locked, go_on = threading.Event(), threading.Event()
    with ThreadPoolExecutor(2) as threads:
        interrupting = threads.submit(
            interrupter.interrupt_running_steps, bisect_id, T0 + timedelta(seconds=60), paused_until(locked, go_on)
        )
        assert locked.wait(HANG_GUARD_S)
        finishing = threads.submit(
            finisher.finish_step, step, StepResult(step, SHA, Verdict.BAD), T0 + timedelta(seconds=30)
        )
        wait_for_lock_waiter(watcher, finishing)
        go_on.set()
        assert interrupting.result() == 1
        with pytest.raises(StateError, match="already has the verdict error"):
            finishing.result()
    assert [s.verdict for s in watcher.steps(bisect_id)] == [Verdict.ERROR]
    assert device_s(watcher, bisect_id) == 60.0


def test_an_interrupt_counts_the_gpu_time_only_of_the_steps_it_interrupted(stores: tuple[Store, Store, Store]) -> None:
    """A step that another transaction finishes while the interrupt waits on its row is that transaction's to
    count (here one that adds nothing): the interrupt skips it and adds only the GPU time of the step it stored."""
    writer, interrupter, watcher = stores
    bisect_id = watcher.create_bisect("/src/repo", "a" * 40, SHA, {}, T0)
    finished_meanwhile = watcher.start_step(bisect_id, SHA, 1, "w0", "n", (0,), T0)
    interrupted = watcher.start_step(bisect_id, SHA, 2, "w1", "n", (1,), T0)
    row_held, commit = threading.Event(), threading.Event()

    def finish_without_counting() -> None:
        with writer.writing() as conn:
            conn.execute(
                text("update steps set verdict = 'good', finished = :at where id = :id"),
                {"at": T0 + timedelta(seconds=10), "id": finished_meanwhile},
            )
            row_held.set()
            assert commit.wait(HANG_GUARD_S)

    with ThreadPoolExecutor(2) as threads:
        writing = threads.submit(finish_without_counting)
        assert row_held.wait(HANG_GUARD_S)
        interrupting = threads.submit(interrupter.interrupt_running_steps, bisect_id, T0 + timedelta(seconds=60))
        wait_for_lock_waiter(watcher, interrupting)
        commit.set()
        writing.result()
        assert interrupting.result() == 1
    verdicts = {s.id: s.verdict for s in watcher.steps(bisect_id)}
    assert verdicts == {finished_meanwhile: Verdict.GOOD, interrupted: Verdict.ERROR}
    assert device_s(watcher, bisect_id) == 60.0
