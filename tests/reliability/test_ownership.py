"""The lease that keeps two coordinators off one bisect (bisector/runner/ownership.py) on a real SQLite store and,
where one is available, a PostgreSQL database."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from bisect_helpers import wait_for
from postgres_helpers import BACKENDS, fresh_postgres_database

from bisector.db.store import Store
from bisector.report.status import owner_line
from bisector.runner.coordinator import utc_now
from bisector.runner.ownership import LEASE_TTL_S, Lease, OwnerId, describe_owner, process_start
from bisector.vocab.errors import StateError


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        with Store.open(f"sqlite:///{tmp_path / 'bisect.db'}") as opened:
            yield opened
        return
    with fresh_postgres_database() as url, Store.open(url) as opened:
        yield opened


@pytest.fixture
def bisect_id(store: Store) -> int:
    return store.create_bisect("repo", "g" * 40, "b" * 40, {}, utc_now())


def hold(store: Store, bisect_id: int, owner: str, seconds_ago: float, ttl_s: float = LEASE_TTL_S) -> None:
    beat = utc_now() - timedelta(seconds=seconds_ago)
    assert store.claim_lease(bisect_id, owner, beat, ttl_s, lambda _: True) is None


def test_a_fresh_lease_of_another_host_is_refused(store: Store, bisect_id: int):
    hold(store, bisect_id, "gpu-node-7:4242:99", seconds_ago=1)
    with pytest.raises(StateError, match=r"bisect \d+ is run by another coordinator \(pid 4242 on gpu-node-7"):
        Lease(store, bisect_id, utc_now).__enter__()
    assert store.get_bisect(bisect_id).owner == "gpu-node-7:4242:99"


def test_a_stale_lease_is_taken_over_and_released_after(store: Store, bisect_id: int):
    hold(store, bisect_id, "gpu-node-7:4242:99", seconds_ago=LEASE_TTL_S + 5)
    with Lease(store, bisect_id, utc_now) as lease:
        assert store.get_bisect(bisect_id).owner == lease.owner == str(OwnerId.this_process())
    assert (store.get_bisect(bisect_id).owner, store.get_bisect(bisect_id).heartbeat) == (None, None)


@pytest.mark.parametrize("holders_ttl_s", [LEASE_TTL_S * 4, LEASE_TTL_S / 4])
def test_a_lease_is_judged_by_its_holders_ttl_not_the_claimants(store: Store, bisect_id: int, holders_ttl_s: float):
    """A holder on another host that beat LEASE_TTL_S / 2 ago, then 2 * LEASE_TTL_S ago: alive by one TTL and gone
    by the other, so the claimant (whose TTL is LEASE_TTL_S) is refused exactly while the holder's own TTL says it
    is alive."""
    for seconds_ago in (LEASE_TTL_S / 2, LEASE_TTL_S * 2):
        hold(store, bisect_id, "gpu-node-7:4242:99", seconds_ago, holders_ttl_s)
        if seconds_ago <= holders_ttl_s:
            with pytest.raises(StateError, match=f"once {holders_ttl_s:.0f} s pass without its heartbeat"):
                Lease(store, bisect_id, utc_now).__enter__()
            assert store.get_bisect(bisect_id).owner == "gpu-node-7:4242:99"
        else:
            with Lease(store, bisect_id, utc_now) as lease:
                assert store.get_bisect(bisect_id).owner == lease.owner


def test_a_dead_process_on_this_host_is_replaced_at_once(store: Store, bisect_id: int):
    sleeper = subprocess.Popen(["sleep", "60"])
    started = process_start(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    hold(store, bisect_id, f"{socket.gethostname()}:{sleeper.pid}:{started}", seconds_ago=0)
    with Lease(store, bisect_id, utc_now):
        pass


def test_a_holder_whose_lease_was_taken_sees_it_lost(store: Store, bisect_id: int):
    with Lease(store, bisect_id, utc_now, heartbeat_s=0.05) as lease:
        hold(store, bisect_id, "thief:1:1", seconds_ago=0)
        wait_for(lease.lost.is_set, what="the holder to notice")
    assert store.get_bisect(bisect_id).owner == "thief:1:1"  # the loser does not release the thief's lease


def test_the_owner_is_described_for_status(store: Store, bisect_id: int):
    now = utc_now()
    assert describe_owner(None, None, now) == "no coordinator"
    assert describe_owner("node:12:5", now - timedelta(seconds=3), now) == "pid 12 on node, last heartbeat 3 s ago"
    stale = describe_owner("node:12:5", now - timedelta(seconds=LEASE_TTL_S + 1), now)
    assert stale.endswith("(gone)")


def test_status_judges_a_holder_by_the_ttl_it_stored(store: Store, bisect_id: int):
    """A holder with a 4 * LEASE_TTL_S lease that beat 2 * LEASE_TTL_S ago is alive; without a stored TTL it
    would be judged by LEASE_TTL_S and called gone."""
    hold(store, bisect_id, "gpu-node-7:4242:99", seconds_ago=LEASE_TTL_S * 2, ttl_s=LEASE_TTL_S * 4)
    alive = str(owner_line(store.get_bisect(bisect_id)))
    assert re.fullmatch(r"coordinator: pid 4242 on gpu-node-7, last heartbeat \d+ s ago", alive)
    hold(store, bisect_id, "gpu-node-7:4242:99", seconds_ago=LEASE_TTL_S * 2, ttl_s=LEASE_TTL_S)
    assert str(owner_line(store.get_bisect(bisect_id))).endswith("(gone)")
