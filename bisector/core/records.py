"""The search's stored decisions (`bisects.extra`) as typed records, read and written here only.

Each field of `SearchRecords` is one key of the bisect's `extra` JSON object. `from_extra` reads what is stored
(a value of the wrong shape reads as absent: a record never stops a report or a resume); `to_extra` writes the
named fields back as JSON. Keys that are not the search's (e.g. `resumed_with`) are left to their owners.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum

from bisector.core.confirm import Confirmation, ConfirmStatus
from bisector.core.prune import PrunePlan


class Analysis(StrEnum):
    """The explanation phase of a found culprit."""

    PENDING = "pending"  # stored with the verdict: `bisect resume` finishes an explanation cut short
    DONE = "done"


class EndpointCheck(StrEnum):
    """How an endpoint's role (good end, bad end) was established."""

    TESTED = "tested"  # run before the search relied on it (--verify-endpoints first, noise expected, a skip seen)
    TESTED_LAZILY = "tested_lazily"  # run because the conclusion rested on it
    TESTED_SPARE = "tested_spare"  # lazily, run early in a slot no probe could use (the candidates reach it)
    ASSUMED = "assumed"  # never run: the conclusion did not rest on it (as `git bisect run`)
    MARKED = "marked"  # never run: a person's verdict decided it (`bisect mark`, a log `bisect replay` read)


@dataclass(frozen=True)
class MergePhase:
    """--all-parents: a bad merge whose merged branch the search descended into, the positions it searched, and the
    merge's parent that brought the branch in (git's number less one: 1, the second parent; an octopus merge has
    more)."""

    merge: str
    order: tuple[int, ...]
    parent: int = 1  # a record without it was stored when only the second parent was descended into

    def to_json(self) -> dict[str, object]:
        return {"merge": self.merge, "order": list(self.order), "parent": self.parent}

    @classmethod
    def from_json(cls, data: object) -> MergePhase | None:
        if not isinstance(data, Mapping):
            return None
        merge, order, parent = data.get("merge"), data.get("order"), data.get("parent", 1)
        if not isinstance(merge, str) or not isinstance(order, list) or not all(isinstance(p, int) for p in order):
            return None
        return cls(merge, tuple(order), parent) if isinstance(parent, int) and parent >= 1 else None


@dataclass(frozen=True)
class SearchRecords:
    quarantined: Mapping[str, str] = field(default_factory=dict)  # worker -> why its results no longer count
    reference_checked: tuple[str, ...] = ()  # workers whose endpoints were re-run after a disagreement
    merge_phases: tuple[MergePhase, ...] = ()
    confirmation: Confirmation | None = None
    decisions: Mapping[str, Mapping[str, object]] = field(default_factory=dict)  # sha -> stats.Decision JSON
    flake_seen: bool = False
    analysis: Analysis | None = None
    # "good" / "bad" -> how checked: stored when an endpoint is first sent to run, ASSUMED ones at the end
    endpoints: Mapping[str, EndpointCheck] = field(default_factory=dict)
    built_ahead: tuple[str, ...] = ()  # commits whose images were built ahead of their steps (--build-ahead)
    pruning: PrunePlan | None = None  # --prune auto: stored before the search's first step

    @classmethod
    def from_extra(cls, extra: Mapping[str, object]) -> SearchRecords:
        quarantined = extra.get("quarantined")
        checked = extra.get("reference_checked")
        phases = extra.get("merge_phases")
        decisions = extra.get("decisions")
        analysis = extra.get("analysis")
        endpoints = extra.get("endpoints")
        built_ahead = extra.get("built_ahead")
        return cls(
            quarantined={str(k): str(v) for k, v in quarantined.items()} if isinstance(quarantined, Mapping) else {},
            reference_checked=tuple(str(w) for w in checked) if isinstance(checked, list) else (),
            merge_phases=tuple(p for d in phases if (p := MergePhase.from_json(d))) if isinstance(phases, list) else (),
            confirmation=_confirmation(extra.get("confirmation")),
            decisions={str(k): v for k, v in decisions.items() if isinstance(v, Mapping)}
            if isinstance(decisions, Mapping)
            else {},
            flake_seen=extra.get("flake_seen") is True,
            analysis=Analysis(str(analysis)) if analysis in tuple(Analysis) else None,
            endpoints={k: EndpointCheck(v) for k, v in endpoints.items() if v in tuple(EndpointCheck)}
            if isinstance(endpoints, Mapping)
            else {},
            built_ahead=tuple(str(s) for s in built_ahead) if isinstance(built_ahead, list) else (),
            pruning=PrunePlan.from_json(extra.get("pruning")),
        )

    def to_extra(self, *names: str) -> dict[str, object]:
        """The named fields (all when none are named) as the JSON values stored under their keys."""
        known = [f.name for f in fields(self)]
        unknown = set(names) - set(known)
        if unknown:
            raise ValueError(f"not a search record: {', '.join(sorted(unknown))}")
        return {name: _json(getattr(self, name)) for name in names or known}


def _json(value: object) -> object:
    if isinstance(value, Confirmation):
        return value.to_json()
    if isinstance(value, MergePhase | PrunePlan):
        return value.to_json()
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    return value


def _confirmation(data: object) -> Confirmation | None:
    if not isinstance(data, Mapping) or data.get("status") not in tuple(ConfirmStatus):
        return None
    try:
        return Confirmation(
            ConfirmStatus(str(data["status"])),
            float(str(data.get("p_value", 1.0))),
            int(str(data.get("pairs_done", 0))),
            int(str(data.get("pairs_wanted", 0))),
            str(data.get("reason", "")),
        )
    except ValueError:
        return None
