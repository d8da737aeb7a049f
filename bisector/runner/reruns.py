"""Which reruns of a bisect run (`Coordinator.rerun`, in any process), so that `bisect cancel` can stop them.

A rerun registers in its bisect's `extra` while it runs ("reruns": token -> {"owner": process, "sha": commit,
"heartbeat": time, "ttl_s": seconds}), renews the entry's heartbeat every HEARTBEAT_S from a thread of its own, and
asks every round whether a cancel has revoked its entry. A cancel (revoke_reruns) marks the entries of the running
reruns revoked ("revoked": true): each stops its running steps, stores them as cancelled and, on leaving, marks its
entry with how it ended ("ended": "cancelled", or "finished" when it had ended by itself first); the cancel waits a
bounded time for that mark (reruns_stopped), removes the ended entries and names only the reruns it stopped. A rerun
that was not revoked removes its own entry. A rerun killed by a signal it could not catch leaves its entry and its
steps running: end_dead_reruns (the next `bisect status`, `cancel`, `resume` or `run-at --bisect` of the bisect)
stores those steps as interrupted, ending at the rerun's last heartbeat, and removes the entry, once the rerun is gone
by the lease's rule (ownership.holder_is_gone): its process is gone from this host, or, on any host, its heartbeat is
older than the entry's TTL (its coordinator's lease TTL, LEASE_TTL_S unless configured). A cancel waits for no gone
rerun. A living rerun judged gone (its heartbeat kept from the store past the TTL) finds its entry removed at its next
round and stops (RerunLostError). A coordinator that stores its running steps as interrupted (a stop signal, `bisect
resume`) leaves those of the running reruns registered here to them.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import Collection
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from bisector.db.store import Store
from bisector.runner.ownership import HEARTBEAT_S, LEASE_TTL_S, Clock, Heartbeat, OwnerId, holder_is_gone
from bisector.runner.side_runs import SideRunsCancelledError
from bisector.vocab.domain import RERUN_STOP_WAIT_S
from bisector.vocab.errors import BisectError, StateError
from bisector.vocab.processes import ProcessGroup

RERUNS_KEY = "reruns"
REVOKED = "revoked"  # an entry's key: a cancel asked its rerun to stop
HEARTBEAT = "heartbeat"  # an entry's key: when its rerun last showed it lives (ISO 8601)
TTL = "ttl_s"  # an entry's key: how long after its last heartbeat its rerun is gone (its coordinator's lease TTL)
GROUPS = "groups"  # an entry's key: [pgid, its leader's start time] of its steps' commands on its host
ENDED = "ended"  # an entry's key, once its revoked rerun ended: CANCELLED (the cancel stopped it) or FINISHED
CANCELLED, FINISHED = "cancelled", "finished"
REVOKE_POLL_S = 0.2


class RerunLostError(StateError):
    """A rerun's entry was removed while it ran: another process judged it gone and stored its steps as
    interrupted. The rerun stops without writing a result."""


class RerunRegistration:
    """A rerun's entry, for a with-block: written on entry with a heartbeat renewed every heartbeat_s and the ttl_s
    its judges apply (none in an in-memory store, which this process alone reads: such an entry is judged by its
    process alone); on exit removed, or, when a cancel revoked it, marked with how the rerun ended (stopped by
    SideRunsCancelledError or not) for the cancel to read and remove."""

    def __init__(
        self,
        store: Store,
        bisect_id: int,
        sha: str,
        now: Clock = lambda: datetime.now(UTC),
        heartbeat_s: float = HEARTBEAT_S,
        ttl_s: float = LEASE_TTL_S,
    ) -> None:
        self.store = store
        self.bisect_id = bisect_id
        self.sha = sha
        self.now = now
        self.ttl_s = ttl_s
        self.entry: dict[str, Any] = {"owner": str(OwnerId.this_process()), "sha": sha}
        self.token = uuid.uuid4().hex  # one process may run several reruns of a bisect
        self._groups: list[list[Any]] = []  # as recorded in the entry
        self._heartbeat = Heartbeat(self._beat, heartbeat_s, name=f"rerun-{bisect_id}")

    def __enter__(self) -> RerunRegistration:
        if self.store.is_private:
            self.store.change_extra(self.bisect_id, lambda extra: self._with_own(extra, self.entry))
            return self
        beat = self.now().isoformat()
        entry = {**self.entry, HEARTBEAT: beat, TTL: self.ttl_s}
        self.store.change_extra(self.bisect_id, lambda extra: self._with_own(extra, entry))
        self._heartbeat.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._heartbeat.stop()
        ended = CANCELLED if isinstance(exc, SideRunsCancelledError) else FINISHED
        with contextlib.suppress(BisectError):  # a lost store: the error that ended the rerun is the one to see
            self.store.change_extra(self.bisect_id, lambda extra: self._leaving(extra, ended))

    def record_groups(self, groups_here: Collection[ProcessGroup]) -> None:
        """Record the process groups its running steps' commands lead (on this host), each with its leader's start
        time as its worker read it, for end_dead_reruns to end should this process die; written only when they
        changed."""
        groups = [[group.pgid, group.started] for group in sorted(groups_here)]
        if groups == self._groups:
            return

        def recorded(extra: dict[str, Any]) -> dict[str, Any]:
            own = _reruns(extra).get(self.token)
            return extra if own is None else self._with_own(extra, {**own, GROUPS: groups})

        self.store.change_extra(self.bisect_id, recorded)
        self._groups = groups

    def revoked(self) -> bool:
        """Whether a cancel revoked the entry (read from the store); RerunLostError when the entry is gone."""
        own = _reruns(self.store.get_bisect(self.bisect_id).extra).get(self.token)
        if own is None:
            raise RerunLostError(
                f"the rerun of bisect {self.bisect_id} at {self.sha[:12]} lost its registration: judged gone (its "
                f"heartbeat older than {self.ttl_s:.0f} s, or its process not found on its host), its running steps "
                "were stored as interrupted; it stopped"
            )
        return bool(own.get(REVOKED))

    def _beat(self) -> bool:
        """Renew the entry's heartbeat; whether it is still there to renew (a rerun judged gone has lost it)."""
        beat = self.now().isoformat()

        def renewed(extra: dict[str, Any]) -> dict[str, Any]:
            own = _reruns(extra).get(self.token)
            return extra if own is None else self._with_own(extra, {**own, HEARTBEAT: beat})

        return self.token in _reruns(self.store.change_extra(self.bisect_id, renewed))

    def _with_own(self, extra: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
        return _with_reruns(extra, {**_reruns(extra), self.token: entry})

    def _leaving(self, extra: dict[str, Any], ended: str) -> dict[str, Any]:
        reruns = _reruns(extra)
        own = reruns.pop(self.token, None)
        if own is not None and own.get(REVOKED):
            reruns[self.token] = {**own, ENDED: ended}
        return _with_reruns(extra, reruns)


def revoke_reruns(store: Store, bisect_id: int, now: datetime) -> list[str]:
    """Revoke the entries of the bisect's running reruns, each of which then stops within a round; their tokens,
    for reruns_stopped. The entries of dead reruns are left to end_dead_reruns."""

    def revoking(extra: dict[str, Any]) -> dict[str, Any]:
        reruns = _reruns(extra)
        return _with_reruns(extra, {t: {**e, REVOKED: True} if _running(e, now) else e for t, e in reruns.items()})

    return [t for t, entry in _reruns(store.change_extra(bisect_id, revoking)).items() if _running(entry, now)]


def reruns_stopped(
    store: Store, bisect_id: int, revoked: Collection[str], now: Clock, wait_s: float = RERUN_STOP_WAIT_S
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Wait up to wait_s for the revoked reruns to end or be gone, and remove the entries of the reruns that ended.
    The commits of those the cancel stopped (not of one that ended by itself first, nor of one that died), and of
    those still running after wait_s: asked to stop, they stop at their next round unless they die first."""
    deadline = time.monotonic() + wait_s
    while _any_running(store, bisect_id, revoked, now()) and time.monotonic() < deadline:
        time.sleep(REVOKE_POLL_S)
    before = _reruns(store.change_extra(bisect_id, _without_ended))
    entries = [before[t] for t in revoked if t in before]
    stopped = (entry["sha"] for entry in entries if entry.get(ENDED) == CANCELLED)
    asked = (entry["sha"] for entry in entries if _running(entry, now()))
    return tuple(dict.fromkeys(stopped)), tuple(dict.fromkeys(asked))


def end_dead_reruns(store: Store, bisect_id: int, now: datetime) -> int:
    """Store the running steps of the bisect's gone reruns (see the module's doc) as interrupted, ending when their
    rerun was last seen (dead_rerun_commits; a step started later: at its start), remove their entries, and end the
    process groups their steps' commands left running on this host (SIGTERM, a grace, SIGKILL), each only while it is
    the group recorded (end_groups: led by the recorded leader, or leaderless with live members): never a process that
    is not theirs. How many steps. A dead rerun at a commit that a running one also runs keeps its entry until that one
    ends: their steps cannot be told apart.

    The groups of the reruns whose process is gone from this host (a judgement that cannot change) are ended before
    their entries are removed, so that a command killed at any moment leaves them ended or still recorded; those of
    the reruns judged gone by their heartbeat alone are ended after (a living one stops its own at its next round)."""
    gone_here = {
        token: entry
        for token, entry in _dead(_reruns(store.get_bisect(bisect_id).extra), now).items()
        if _owner_is_gone_here(entry)
    }
    _end_groups_here(gone_here.values())
    ended: dict[str, dict[str, Any]] = {}

    def without_dead(extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, datetime]]:
        reruns = _reruns(extra)
        ended.clear()
        ended.update(_dead(reruns, now))
        kept = {token: entry for token, entry in reruns.items() if token not in ended}
        return _with_reruns(extra, kept), _last_seen_by_commit(ended.values(), now)

    count = store.interrupt_reruns(bisect_id, without_dead)
    _end_groups_here([entry for token, entry in ended.items() if token not in gone_here])
    return count


def dead_rerun_commits(extra: dict[str, Any], now: datetime) -> dict[str, datetime]:
    """The commits whose running rerun steps end_dead_reruns would store as interrupted (none: nothing to end), each
    with when those steps are counted to have ended (_last_seen_by_commit)."""
    return _last_seen_by_commit(_dead(_reruns(extra), now).values(), now)


def _last_seen_by_commit(entries: Collection[dict[str, Any]], now: datetime) -> dict[str, datetime]:
    """For each commit of these gone reruns, the latest of their last heartbeats (their steps at one commit cannot be
    told apart), never after now; now for a rerun without a readable heartbeat."""
    seen: dict[str, datetime] = {}
    for entry in entries:
        heartbeat, _ = _heartbeat(entry)
        last = now if heartbeat is None else min(heartbeat, now)
        seen[entry["sha"]] = max(last, seen.get(entry["sha"], last))
    return seen


def _dead(reruns: dict[str, dict[str, Any]], now: datetime) -> dict[str, dict[str, Any]]:
    """The entries of the dead reruns whose steps can be ended, by token."""
    running = {entry["sha"] for entry in reruns.values() if _running(entry, now)}
    return {t: e for t, e in reruns.items() if _is_gone(e, now) and e["sha"] not in running}


def _owner_is_gone_here(entry: dict[str, Any]) -> bool:
    owner = OwnerId.parse(entry["owner"])
    return owner is not None and owner.is_gone_here()


def _end_groups_here(entries: Collection[dict[str, Any]]) -> None:
    """End the recorded process groups of these reruns' steps that are still the groups recorded on this host
    (end_groups)."""
    groups = []
    for entry in entries:
        owner = OwnerId.parse(entry["owner"])
        if owner is None or owner.host != socket.gethostname():  # another host's groups are not ours to end
            continue
        for group in entry.get(GROUPS, []):
            with contextlib.suppress(TypeError, ValueError, LookupError):  # unreadable: it names no process of ours
                groups.append(ProcessGroup(int(group[0]), str(group[1])))
    if groups:
        from bisector.workers.process import KILL_GRACE_S
        from bisector.workers.process_tree import end_groups

        end_groups(groups, KILL_GRACE_S)


def running_rerun_commits(extra: dict[str, Any], now: datetime) -> tuple[str, ...]:
    """The commits of the reruns registered in a bisect's extra that have not ended and are not gone."""
    return tuple(entry["sha"] for entry in _reruns(extra).values() if _running(entry, now))


def _without_ended(extra: dict[str, Any]) -> dict[str, Any]:
    return _with_reruns(extra, {t: e for t, e in _reruns(extra).items() if ENDED not in e})


def _any_running(store: Store, bisect_id: int, tokens: Collection[str], now: datetime) -> bool:
    reruns = _reruns(store.get_bisect(bisect_id).extra)
    return any(token in reruns and _running(reruns[token], now) for token in tokens)


def _running(entry: dict[str, Any], now: datetime) -> bool:
    return ENDED not in entry and not _is_gone(entry, now)


def _is_gone(entry: dict[str, Any], now: datetime) -> bool:
    if HEARTBEAT not in entry:  # a rerun that does not beat (see RerunRegistration)
        return holder_is_gone(entry["owner"], now, now)
    heartbeat, ttl_s = _heartbeat(entry)
    return holder_is_gone(entry["owner"], heartbeat, now, ttl_s)


def _heartbeat(entry: dict[str, Any]) -> tuple[datetime | None, float]:
    """The entry's last heartbeat and TTL; (None, LEASE_TTL_S) when it has no readable heartbeat: gone, as a lease
    without a heartbeat."""
    try:
        return datetime.fromisoformat(entry[HEARTBEAT]), float(entry.get(TTL, LEASE_TTL_S))
    except (LookupError, TypeError, ValueError):
        return None, LEASE_TTL_S


def _reruns(extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(extra.get(RERUNS_KEY, {}))


def _with_reruns(extra: dict[str, Any], reruns: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """extra with these entries (without the key when there are none)."""
    rest = {key: value for key, value in extra.items() if key != RERUNS_KEY}
    return {**rest, RERUNS_KEY: reruns} if reruns else rest
