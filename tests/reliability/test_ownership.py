"""The lease that keeps two coordinators off one bisect (bisector/runner/ownership.py) on a real SQLite store."""

from __future__ import annotations

import socket
import subprocess
from datetime import timedelta

import pytest
from bisect_helpers import wait_for

from bisector.db.store import Store
from bisector.runner.coordinator import utc_now
from bisector.runner.ownership import LEASE_TTL_S, Lease, OwnerId, describe_owner, process_start
from bisector.vocab.errors import StateError


@pytest.fixture
def bisect_id(store: Store) -> int:
    return store.create_bisect("repo", "g" * 40, "b" * 40, {}, utc_now())


def hold(store: Store, bisect_id: int, owner: str, seconds_ago: float) -> None:
    assert store.claim_lease(bisect_id, owner, utc_now() - timedelta(seconds=seconds_ago), lambda *_: True) is None


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
