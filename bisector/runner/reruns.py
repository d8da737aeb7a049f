"""Which reruns of a bisect run (`Coordinator.rerun`, in any process), so that `bisect cancel` can stop them.

A rerun registers in its bisect's `extra` while it runs ("reruns": token -> {"owner": process, "sha": commit}) and
asks every round whether its entry is still there. A cancel removes every entry (revoke_reruns): each rerun stops
its running steps, stores them as cancelled and ends. A rerun killed by a signal it could not catch leaves its entry
and its steps running: end_dead_reruns (the next `bisect status`, `cancel`, `resume` or `run-at --bisect` of the
bisect) stores those steps as interrupted and removes the entry, once its process is gone from this host (one on
another host cannot be judged). A coordinator that stores its running steps as interrupted (a stop signal, `bisect
resume`) leaves those of the living reruns registered here to them.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime
from types import TracebackType
from typing import Any

from bisector.db.store import Store
from bisector.runner.ownership import OwnerId
from bisector.vocab.errors import BisectError

RERUNS_KEY = "reruns"


class RerunRegistration:
    """A rerun's entry, for a with-block: written on entry, removed on exit (if a cancel has not removed it)."""

    def __init__(self, store: Store, bisect_id: int, sha: str) -> None:
        self.store = store
        self.bisect_id = bisect_id
        self.entry = {"owner": str(OwnerId.this_process()), "sha": sha}
        self.token = uuid.uuid4().hex  # one process may run several reruns of a bisect

    def __enter__(self) -> RerunRegistration:
        self.store.change_extra(self.bisect_id, self._with_own)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        with contextlib.suppress(BisectError):  # a lost store: the error that ended the rerun is the one to see
            self.store.change_extra(self.bisect_id, self._without_own)

    def revoked(self) -> bool:
        """Whether a cancel removed the entry (read from the store)."""
        return self.token not in _reruns(self.store.get_bisect(self.bisect_id).extra)

    def _with_own(self, extra: dict[str, Any]) -> dict[str, Any]:
        return _with_reruns(extra, {**_reruns(extra), self.token: self.entry})

    def _without_own(self, extra: dict[str, Any]) -> dict[str, Any]:
        return _with_reruns(extra, {t: e for t, e in _reruns(extra).items() if t != self.token})


def revoke_reruns(store: Store, bisect_id: int) -> tuple[str, ...]:
    """Remove the entries of every rerun of the bisect, each of which then stops within a round. The commits of
    those whose process lives (running_rerun_commits)."""
    return running_rerun_commits(store.change_extra(bisect_id, lambda extra: _with_reruns(extra, {})))


def end_dead_reruns(store: Store, bisect_id: int, now: datetime) -> int:
    """Store the running steps of the bisect's reruns whose process is gone from this host as interrupted, and remove
    their entries; how many steps. A dead rerun at a commit that a living one also runs keeps its entry until that
    one ends: their steps cannot be told apart."""
    return store.interrupt_reruns(bisect_id, now, _without_dead)


def has_dead_reruns(extra: dict[str, Any]) -> bool:
    """Whether end_dead_reruns has something to end in a bisect's extra."""
    return _without_dead(extra)[0] != extra


def _without_dead(extra: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """extra without the entries of the dead reruns whose steps can be ended, and the commits of those."""
    reruns = _reruns(extra)
    living = {entry["sha"] for entry in reruns.values() if _lives(entry["owner"])}
    dead = {token for token, entry in reruns.items() if not _lives(entry["owner"]) and entry["sha"] not in living}
    kept = {token: entry for token, entry in reruns.items() if token not in dead}
    return _with_reruns(extra, kept), tuple(dict.fromkeys(reruns[token]["sha"] for token in dead))


def running_rerun_commits(extra: dict[str, Any]) -> tuple[str, ...]:
    """The commits of the reruns registered in a bisect's extra whose process lives (one on another host counts
    as living)."""
    return tuple(entry["sha"] for entry in _reruns(extra).values() if _lives(entry["owner"]))


def _lives(owner: str) -> bool:
    parsed = OwnerId.parse(owner)
    return parsed is None or not parsed.is_gone_here()


def _reruns(extra: dict[str, Any]) -> dict[str, dict[str, str]]:
    return dict(extra.get(RERUNS_KEY, {}))


def _with_reruns(extra: dict[str, Any], reruns: dict[str, dict[str, str]]) -> dict[str, Any]:
    """extra with these entries (without the key when there are none)."""
    rest = {key: value for key, value in extra.items() if key != RERUNS_KEY}
    return {**rest, RERUNS_KEY: reruns} if reruns else rest
