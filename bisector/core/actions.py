"""What the decision core asks the loop to do. Plain values: the core never does any of it itself."""

from __future__ import annotations

from dataclasses import dataclass

from bisector.core.records import SearchRecords
from bisector.vocab.domain import BisectStatus, StepPurpose


@dataclass(frozen=True)
class Submit:
    """Run the commit at `position` once on `worker` (always named: the core places every step).

    preemptible: a search run (an endpoint check or a probe). An executor shared with other bisects may cancel it
    to give its slot to one holding none; its result then comes back CANCELLED, which the core takes as not run
    (the commit is run again later). Confirmation and reference runs are pairs and checks of one worker: never."""

    position: int
    purpose: StepPurpose
    worker: str
    preemptible: bool = False


@dataclass(frozen=True)
class Cancel:
    step_id: int


@dataclass(frozen=True)
class Note:
    text: str  # for the person watching


@dataclass(frozen=True)
class Record:
    """Store these fields of the search's records, after the results they were concluded from."""

    records: SearchRecords
    names: tuple[str, ...]


@dataclass(frozen=True)
class Descend:
    """--all-parents: the merge tested bad; list the commits it merged through its first parent from `parent` on
    (git's number less one; 1: the second parent, then an octopus merge's others) that brought any in, and call
    `SearchCore.descend` with that parent, or `SearchCore.no_branch` when none did."""

    merge: str
    parent: int = 1


@dataclass(frozen=True)
class Finish:
    """The bisect's answer; its records are stored with it. The loop then cancels what still runs."""

    status: BisectStatus
    message: str
    first_bad: str | None = None
    last_good: str | None = None
    records: SearchRecords | None = None
    names: tuple[str, ...] = ()


Action = Submit | Cancel | Note | Record | Descend | Finish
