"""The two questions `SearchCore.decide` asks each pass: is the search over (and with what answer), and which
commits the free workers run next. Pure functions of the core's state; they change only its plans (the
confirmation pairs owed) and its records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from bisector.confirm import ConfirmStatus
from bisector.search.actions import Descend, Finish, Note
from bisector.strategies import KArySearch, OutcomeKind, Strategy
from bisector.vocab.domain import BisectStatus

if TYPE_CHECKING:
    from bisector.search.decide import SearchCore


def conclude(core: SearchCore) -> Finish | Descend | None:
    """The answer once the strategy has one, its endpoints are checked, a bad merge was descended into and the
    culprit confirmed (where confirmation is wanted); None while the search goes on."""
    state = core.state()
    outcome = core.strategy().outcome(state)
    if outcome is None:
        return None
    if any(core.verdict(index) is None for index in core.endpoints_owed()):
        return None  # lazily: an endpoint the answer rests on runs first
    first_bad, last_good = core.commit_at(outcome.first_bad), core.commit_at(outcome.last_good)
    old_term, new_term = core.spec.search.terms()  # git's words: "the first fixed commit" with --find-fix
    if outcome.kind is OutcomeKind.FOUND and core.merges.wants(first_bad.sha):
        return Descend(first_bad.sha)
    confirmed = ""
    if outcome.kind is OutcomeKind.FOUND and core.confirming.wanted(core.flake_seen):
        confirmation, note = core.confirming.evaluate(last_good.position, first_bad.position)
        if note:
            core.outbox.append(Note(note))
        if confirmation is None:
            return None
        core.records = replace(core.records, confirmation=confirmation)
        core.stored("confirmation")
        if confirmation.status is ConfirmStatus.NOT_REPRODUCIBLE:
            message = (
                f"{first_bad.sha[:12]} looked like the first {new_term} commit, but re-running it against its parent "
                f"did not reproduce the difference ({confirmation.reason}): flaky, not a culprit"
            )
            return core.finish(BisectStatus.NOT_REPRODUCIBLE, message, first_bad.sha, last_good.sha)
        confirmed = confirmation.reason
    status = BisectStatus.FOUND if outcome.kind is OutcomeKind.FOUND else BisectStatus.AMBIGUOUS
    if status is BisectStatus.FOUND:
        message = f"first {new_term} commit: {first_bad.sha[:12]} {first_bad.subject}"
    else:
        count = outcome.first_bad - outcome.last_good
        message = (
            f"the first {new_term} commit is one of {count} commits after {last_good.sha[:12]} up to "
            f"{first_bad.sha[:12]}: the commits between could not be tested"
        )
    if outcome.confidence is not None and outcome.confidence < 1.0:
        message += f" (posterior {outcome.confidence:.3f})"
    if confirmed:
        message += f"; confirmed: {confirmed}"
    if contradictions := state.contradictions():
        shas = ", ".join(core.commit_at(i).sha[:12] for i in contradictions[:5])
        message += f"; warning: tested {old_term} after the first {new_term} commit: {shas} (not monotonic)"
    return core.finish(status, message, first_bad.sha, last_good.sha)


def search_positions(core: SearchCore, strategy: Strategy, usable: Sequence[str], workers: Sequence[str]) -> list[int]:
    """Positions to run for the search, most urgent first (one entry per run): retries, more runs, the
    endpoints owed, the strategy's probes for the workers left, then (lazily) the endpoints the candidates
    still reach, in slots no probe can use."""
    ledger, order, repeat = core.ledger, core.order, core.spec.search.repeat
    busy = {f.position for f in ledger.in_flight.values()}
    tested = sorted(p for p in ledger.tested() if p in core.index_of)
    if isinstance(strategy, KArySearch):  # a retry outside the boundary would only be cancelled
        lo, hi = core.state().boundary()
        ends = (order[0], order[-1])
        tested = [p for p in tested if lo <= core.index_of[p] <= hi or p in ends]
    wanted = [p for p in tested if p not in busy and ledger.needs_retry(p) and placeable(core, p, usable, workers)]
    for position in tested:
        wanted += [position] * ledger.more_wanted(position)
    wanted += endpoint_runs(core, core.endpoints_owed(), busy, wanted)
    free = len(usable) - len(wanted)
    if free > 0:
        for position in [order[i] for i in strategy.next_probes(core.state(), max(free // repeat, 1))]:
            if position not in wanted:
                wanted += [position] * (repeat if position not in ledger.histories else 1)
    if len(wanted) < len(usable):
        wanted += endpoint_runs(core, core.endpoints_reached(), busy, wanted)
    return wanted


def endpoint_runs(core: SearchCore, indexes: Sequence[int], busy: set[int], wanted: Sequence[int]) -> list[int]:
    """Runs of the endpoints at these indexes that are undecided, not running and not already wanted."""
    ledger, out = core.ledger, []
    for index in indexes:
        position = core.order[index]
        if position in busy or position in wanted or ledger.verdict(position) is not None:
            continue
        if position not in ledger.histories or not (ledger.needs_retry(position) or ledger.more_wanted(position)):
            out += [position] * core.spec.search.repeat  # untested, or its only results were quarantined
    return out


def placeable(core: SearchCore, position: int, usable: Sequence[str], workers: Sequence[str]) -> bool:
    """A retry waits for a worker that has not failed this commit yet, unless every worker has."""
    avoid = core.ledger.failed_workers(position)
    if avoid >= {w for w in workers if w not in core.ledger.quarantined}:
        return True
    return any(name not in avoid for name in usable)
