"""K-ary bisection: keep every slot busy, split what is still open as evenly as the slots allow.

With W free slots on a fresh range the probes sit at the quantiles i/(W+1), so a range of n commits
needs about ceil(log_{W+1} n) rounds. A slot that frees while others still run gets the most
informative probe given the in-flight ones: the in-flight positions cut the open range into segments,
and new probes go to the segment with the most suspects per probe.
"""

from __future__ import annotations

from bisector.strategies.base import Outcome, SearchState, settled_outcome


class KArySearch:
    name = "kary"

    def next_probes(self, state: SearchState, free_slots: int) -> list[int]:
        if free_slots <= 0:
            return []
        segments = _segments(state)
        assigned = [0] * len(segments)
        for _ in range(free_slots):
            best = max(
                (i for i, seg in enumerate(segments) if assigned[i] < len(seg)),
                key=lambda i: (len(segments[i]) + 1) / (assigned[i] + 1),
                default=None,
            )
            if best is None:
                break
            assigned[best] += 1
        probes: list[int] = []
        for segment, count in zip(segments, assigned, strict=True):
            probes.extend(_quantiles(segment, count))
        return probes

    def outcome(self, state: SearchState) -> Outcome | None:
        return settled_outcome(state)


def _segments(state: SearchState) -> list[list[int]]:
    """The untested positions inside the boundary, split at the positions still in flight."""
    lo, hi = state.boundary()
    segments: list[list[int]] = [[]]
    for p in range(lo + 1, hi):
        if p in state.in_flight:
            segments.append([])
        elif p not in state.verdicts:
            segments[-1].append(p)
    return [s for s in segments if s]


def _quantiles(segment: list[int], count: int) -> list[int]:
    """count probes splitting a segment of s untested commits (s + 1 suspects) into equal parts."""
    suspects = len(segment) + 1
    indices = sorted({round(j * suspects / (count + 1)) - 1 for j in range(1, count + 1)})
    return [segment[max(0, min(i, len(segment) - 1))] for i in indices]
