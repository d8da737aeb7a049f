"""Merge descent (--all-parents): a merge found bad is descended into. The commits its merged branch brought
in become the next order, between the merge's first parent (good) and the merge itself (bad), so the answer
is a commit of that branch or, if the branch alone is good, the merge. An octopus merge's branches are
descended into one after the other, while the answer stays the merge: each is bisected against the first
parent alone, and the merge is the answer only once every branch alone is good."""

from __future__ import annotations

from collections.abc import Sequence

from bisector.core.ledger import Ledger
from bisector.core.records import MergePhase
from bisector.vocab.domain import Commit


class MergeDescent:
    def __init__(
        self, ledger: Ledger, phases: Sequence[MergePhase], enabled: bool, pruned: frozenset[str] = frozenset()
    ) -> None:
        """pruned: first-parent commits that leave the search (bisector/core/prune.py)."""
        self.ledger = ledger
        self.pruned = pruned
        self.phases: list[MergePhase] = list(phases)
        self.enabled = enabled
        self.not_merges: set[str] = set()  # found answers that merged no branch

    def order(self) -> list[int]:
        """The positions being bisected, good end first: the first-parent chain, or the latest merged branch."""
        if self.phases:
            return list(self.phases[-1].order)
        shas = self.ledger.candidates.shas()
        return [position for position, sha in enumerate(shas) if sha not in self.pruned]

    def wants(self, sha: str) -> int | None:
        """The first parent (1: the second) whose branch a found first bad commit must be looked into through next
        (it may be a merge with a branch not yet descended into); None when there is none to look into."""
        if not self.enabled or sha in self.not_merges:
            return None
        return 1 + max((phase.parent for phase in self.phases if phase.merge == sha), default=0)

    def descend(self, merge: str, first_parent: str, branch: Sequence[str], parent: int) -> list[int]:
        """The branch the merge brought in through its parent `parent` (its commits oldest first) joins the ledger,
        numbered after the candidates; returns the new order. Those among the candidates already (a merge of the
        first-parent line back into a branch brings in commits of that line) keep their positions and verdicts."""
        position = self.ledger.position
        if first_parent in position:
            good = position[first_parent]
        else:  # paths limit the candidates and the first parent left them alone: the last good one before the merge
            current = self.order()
            good = current[current.index(position[merge]) - 1]
        fresh = [sha for sha in branch if sha not in position]
        start = len(self.ledger.candidates)
        self.ledger.extend([Commit(start + i, sha) for i, sha in enumerate(fresh)])
        order = (good, *(position[sha] for sha in branch), position[merge])
        self.phases.append(MergePhase(merge, order, parent))
        return list(order)
