"""Confirmation of a found culprit: interleaved re-runs of the first bad commit and the last good one (its parent,
unless the search passed over commits between them: pruned ones, a merged branch's base), each pair on one
worker back to back (alternating which goes first), until the difference is significant (CONFIRMED) or the
budget is spent (NOT_REPRODUCIBLE). A pair whose worker disappears or is quarantined runs again elsewhere."""

from __future__ import annotations

from collections.abc import Collection

from bisector.core.confirm import Confirmation, ConfirmStatus, confirm_pass_fail
from bisector.core.ledger import Ledger


class Confirming:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.pair: tuple[int, int] | None = None  # (parent, first bad) positions under confirmation
        self.pairs: list[tuple[int, int]] = []  # pairs still to run, each (first, second) on one worker
        self.second: dict[str, int] = {}  # worker -> the position its pair runs next

    def wanted(self, flake_seen: bool) -> bool:
        spec = self.ledger.spec
        if spec.search.confirm is not None:
            return spec.search.confirm
        return spec.search.strategy == "noisy" or spec.search.repeat_limit > 1 or flake_seen

    def evaluate(self, parent: int, first_bad: int) -> tuple[Confirmation | None, str]:
        """The confirmation of this pair, or (None, a note) while more pairs are needed or running."""
        if self.pair != (parent, first_bad):
            self.pair, self.pairs, self.second = (parent, first_bad), [], {}
        busy = any(f.position in (parent, first_bad) for f in self.ledger.in_flight.values())
        if self.pairs or self.second or busy:
            return None, ""
        before, after = self.ledger.view(parent), self.ledger.view(first_bad)
        judge = self.ledger.judge
        if judge.statistical:
            from bisector.core.stats import confirm_samples

            result = confirm_samples(
                before.samples, after.samples, direction=judge.direction, find_fix=self.ledger.spec.search.find_fix
            )
        else:
            observed = (before.observed(), after.observed())
            result = confirm_pass_fail((before.goods, before.bads), (after.goods, after.bads), observed=observed)
        if result.status is ConfirmStatus.NEED_MORE:
            self.pairs = [
                (parent, first_bad) if i % 2 == 0 else (first_bad, parent) for i in range(result.pairs_wanted)
            ]
            sha = self.ledger.candidates[first_bad].sha
            return None, f"confirming {sha[:12]}: {result.pairs_wanted} more pair(s)"
        return result, ""

    def requeue_lost(self, workers: Collection[str]) -> None:
        """A pair whose worker is gone or quarantined runs again, whole, elsewhere."""
        for worker in list(self.second):
            if self.pair and (worker in self.ledger.quarantined or worker not in workers):
                del self.second[worker]
                self.pairs.append(self.pair)

    def next_run(self, worker: str) -> int | None:
        """The position this free worker runs next for the confirmation, if any."""
        if worker in self.second:
            return self.second.pop(worker)
        if self.pairs:
            first, second = self.pairs.pop(0)
            self.second[worker] = second
            return first
        return None
