"""Who runs a bisect: a lease in the store, renewed by a heartbeat, so that two coordinators never run one.

A coordinator claims its bisect's lease before it sends a step and renews it every HEARTBEAT_S from a thread
of its own (a long step, an executor start or the explanation never starve it). Another coordinator is
refused while the lease is fresh; it takes the bisect over once the holder's TTL (stored with the lease: its
`lease_ttl_s`, LEASE_TTL_S unless configured) passed without a heartbeat, or at once when the holder ran on this
host and its process is gone (kill -9, a crash). A holder that finds its lease taken stops without writing a
verdict.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType

from bisector.db.store import Store
from bisector.vocab.errors import StateError, StoreError
from bisector.vocab.processes import is_gone, process_start

LEASE_TTL_S = 60.0
HEARTBEAT_S = 10.0

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class OwnerId:
    """A process, named so that a reused pid is not mistaken for it: host, pid and the process's start time."""

    host: str
    pid: int
    started: str

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.started}"

    @classmethod
    def parse(cls, text: str) -> OwnerId | None:
        parts = text.rsplit(":", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2])

    @classmethod
    def this_process(cls) -> OwnerId:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, process_start(pid) or "?")

    def is_gone_here(self) -> bool:
        """Whether this owner ran on this host and its process no longer exists (or is another one now)."""
        return is_gone(self.host, self.pid, self.started)


def holders_ttl_s(stored_ttl_s: float | None, fallback_s: float = LEASE_TTL_S) -> float:
    """The TTL a lease's holder stored with it; fallback_s for a lease stored without one."""
    return fallback_s if stored_ttl_s is None else stored_ttl_s


def holder_is_gone(holder: str, heartbeat: datetime | None, now: datetime, ttl_s: float = LEASE_TTL_S) -> bool:
    """Whether a process that beats (a coordinator holding a lease, a rerun: bisector/runner/reruns.py) is gone: its
    last heartbeat is older than ttl_s (or unknown), on any host; or, at once, its process is gone from this host."""
    if heartbeat is None or now - heartbeat > timedelta(seconds=ttl_s):
        return True
    owner = OwnerId.parse(holder)
    return owner is not None and owner.is_gone_here()


def describe_owner(holder: str | None, heartbeat: datetime | None, now: datetime, ttl_s: float = LEASE_TTL_S) -> str:
    """One phrase for `bisect status`: who holds the bisect and how fresh that is (gone by ttl_s, its TTL)."""
    if holder is None:
        return "no coordinator"
    owner = OwnerId.parse(holder)
    who = f"pid {owner.pid} on {owner.host}" if owner else holder
    if heartbeat is None:
        return who
    age_s = (now - heartbeat).total_seconds()
    state = " (gone)" if holder_is_gone(holder, heartbeat, now, ttl_s) else ""
    return f"{who}, last heartbeat {age_s:.0f} s ago{state}"


class Lease:
    """Holds a bisect's lease for a with-block: claimed on entry (StateError when another coordinator holds it),
    renewed by a heartbeat thread, released on exit. `lost` is set when another coordinator took it over."""

    def __init__(
        self,
        store: Store,
        bisect_id: int,
        now: Clock,
        *,
        ttl_s: float = LEASE_TTL_S,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.store = store
        self.bisect_id = bisect_id
        self.now = now
        self.ttl_s = ttl_s
        self.owner = str(OwnerId.this_process())
        self.lost = threading.Event()
        self._heartbeat = Heartbeat(self._renew, heartbeat_s, name=f"lease-{bisect_id}")

    def __enter__(self) -> Lease:
        if self.store.is_private:
            return self  # nobody else can reach an in-memory store
        now = self.now()
        holder = self.store.claim_lease(
            self.bisect_id,
            self.owner,
            now,
            self.ttl_s,
            lambda held: holder_is_gone(held.owner, held.heartbeat, now, holders_ttl_s(held.ttl_s, self.ttl_s)),
        )
        if holder is not None:
            ttl_s = holders_ttl_s(holder.ttl_s, self.ttl_s)
            raise StateError(
                f"bisect {self.bisect_id} is run by another coordinator "
                f"({describe_owner(holder.owner, holder.heartbeat, now, ttl_s)}); "
                f"it can be taken over once {ttl_s:.0f} s pass without its heartbeat"
            )
        self._heartbeat.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if not self._heartbeat.stop():
            return
        if not self.lost.is_set():
            self.store.release_lease(self.bisect_id, self.owner)

    def _renew(self) -> bool:
        renewed = self.store.renew_lease(self.bisect_id, self.owner, self.now())
        if not renewed:
            self.lost.set()
        return renewed


class Heartbeat:
    """Calls beat() every period_s from a thread of its own (so that a long step, an executor start or the
    explanation never starve it), from start() until stop() or until beat() returns False. A StoreError is a missed
    beat (a busy or briefly unreachable store): the next one tries again."""

    def __init__(self, beat: Callable[[], bool], period_s: float, *, name: str) -> None:
        self._beat = beat
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> bool:
        """Stop the beats and wait for the one under way; whether it had started."""
        if self._thread.ident is None:
            return False
        self._stop.set()
        self._thread.join()
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            with contextlib.suppress(StoreError):
                if not self._beat():
                    return
