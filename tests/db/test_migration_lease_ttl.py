"""Migration 0011 (lease_ttl_s): a lease stored before it, without its holder's TTL, is judged by the claimant's TTL
as before, on SQLite and PostgreSQL; a lease taken after it keeps its holder's TTL, and a downgrade drops it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from bisector.db import Store
from bisector.db.engine import make_engine
from bisector.db.schema import bisects
from bisector.runner.coordinator import utc_now
from bisector.runner.ownership import LEASE_TTL_S, Lease
from bisector.vocab.errors import StateError

BEFORE = "0010_job_owner"
HOLDER = "gpu-node-7:4242:99"  # another host's process: judged by its heartbeat alone


def hold_the_old_way(url: str, bisect_id: int, seconds_ago: float) -> None:
    """A lease as a coordinator before 0011 stored it: its owner and heartbeat, no TTL."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            beat = utc_now() - timedelta(seconds=seconds_ago)
            conn.execute(update(bisects).where(bisects.c.id == bisect_id).values(owner=HOLDER, heartbeat=beat))
    finally:
        engine.dispose()


def test_a_lease_stored_before_0011_is_judged_by_the_claimants_ttl(
    store_url: str, migrate: Callable[..., None]
) -> None:
    with Store.open(store_url) as store:
        bisect_id = store.create_bisect("repo", "g" * 40, "b" * 40, {}, utc_now())
    migrate(store_url, BEFORE, down=True)
    hold_the_old_way(store_url, bisect_id, seconds_ago=LEASE_TTL_S / 2)
    with Store.open(store_url) as store:  # upgraded to head
        assert store.get_bisect(bisect_id).owner == HOLDER
        with pytest.raises(StateError, match=f"once {LEASE_TTL_S:.0f} s pass"):
            Lease(store, bisect_id, utc_now).__enter__()
        with Lease(store, bisect_id, utc_now, ttl_s=LEASE_TTL_S / 4) as lease:
            assert store.get_bisect(bisect_id).owner == lease.owner


def test_a_lease_keeps_its_holders_ttl_and_a_downgrade_drops_it(store_url: str, migrate: Callable[..., None]) -> None:
    with Store.open(store_url) as store:
        bisect_id = store.create_bisect("repo", "g" * 40, "b" * 40, {}, utc_now())
        assert store.claim_lease(bisect_id, HOLDER, utc_now(), LEASE_TTL_S * 4, lambda _: True) is None
    engine = make_engine(store_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(select(bisects.c.lease_ttl_s)).scalar_one() == LEASE_TTL_S * 4
    finally:
        engine.dispose()
    migrate(store_url, BEFORE, down=True)
    hold_the_old_way(store_url, bisect_id, seconds_ago=LEASE_TTL_S * 2)  # gone by LEASE_TTL_S, not by the dropped TTL
    with Store.open(store_url) as store, Lease(store, bisect_id, utc_now) as lease:
        assert store.get_bisect(bisect_id).owner == lease.owner
