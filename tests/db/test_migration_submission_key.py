"""Migration 0012 (jobs.submission_key), on SQLite and PostgreSQL: a job stored before it has no key; after it a key
is unique per owner (another owner may use it, jobs without one are many), and a downgrade drops it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bisector.db import Store
from bisector.db.jobs import JobQueue
from bisector.runner.coordinator import utc_now
from bisector.vocab.errors import UnknownBisectError

BEFORE = "0011_lease_ttl"


def bisects(store: Store, count: int) -> list[int]:
    return [store.create_bisect("repo", "g" * 40, "b" * 40, {}, utc_now()) for _ in range(count)]


def test_a_submission_key_is_unique_per_owner_and_a_downgrade_drops_it(
    store_url: str, migrate: Callable[..., None]
) -> None:
    with Store.open(store_url) as store:
        ids = bisects(store, 5)
    migrate(store_url, BEFORE, down=True)
    with Store.open(store_url) as store:  # upgraded to head again
        jobs = JobQueue(store)
        jobs.add(ids[0], 0, "repo", utc_now(), "alice", "key")
        jobs.add(ids[1], 0, "repo", utc_now(), "bob", "key")
        jobs.add(ids[2], 0, "repo", utc_now(), "alice")
        jobs.add(ids[3], 0, "repo", utc_now(), "alice")
        holder = jobs.add(ids[4], 0, "repo", utc_now(), "alice", "key")  # refused by the unique index
        assert holder is not None
        assert holder.bisect_id == ids[0]
        with pytest.raises(UnknownBisectError):
            jobs.get(ids[4])
        assert (found := jobs.submitted_as("alice", "key")) is not None
        assert found.bisect_id == ids[0]
        assert jobs.submitted_as("carol", "key") is None
    migrate(store_url, BEFORE, down=True)
    with Store.open(store_url) as store:
        assert [JobQueue(store).get(i).submission_key for i in ids[:2]] == [None, None]
