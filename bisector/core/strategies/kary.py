"""K-ary bisection: keep every slot busy, and split what is still open so that, with every culprit equally
likely, the mean number of rounds is as small as it can be without raising the worst case.

W probes in a round cut s suspects into W+1 parts. See the rounds as a tree whose leaves are the suspects:
a culprit needs as many rounds as its leaf is deep, so the mean number of rounds is the mean leaf depth.
That is smallest when every leaf sits at depth d or d+1 (d = floor(log_{W+1} s) when each round has W+1
parts), which also keeps the worst case at the fewest rounds possible, ceil(log_{W+1} s). An even split
does not give that tree: 111 suspects at W=8 in 9 parts of ~12 all need 2 more rounds (12 > 9 parts),
while 8 parts of 9 and one of 39 settle 77 culprits in one more round and the other 34 in two.

`part_sizes` builds the first level of that tree. Every part gets the m^(d-1) suspects that a full subtree
one round shorter holds (m = W+1, the parts of each later round); what is left fills parts up to m^d, one
part at a time, so at most one part is neither of the two sizes. This round has (free slots + 1) parts;
later rounds are taken to have W+1, W being the slots the search holds now (free slots plus steps in
flight), as when the loop gathers a whole round. With one slot every split into two halves below the next
power of two is optimal, and the midpoint is taken, as git bisect does.

Endpoints not yet run (lazy checks): when the answer comes to rest on one, it runs, in a slot no probe
uses or in a round of its own. With W > 1 such an endpoint counts as one more suspect of the part beside
it (one that needs a slot, not one that can be the culprit), wherever that does not raise the fewest
rounds the range needs; the large parts go to the ends, so it takes a slot in a part's last round. A
probe planned on the endpoint itself is left out: its slot is spare, and the search runs the endpoint there.

A slot that frees while others still run gets the most informative probe given the in-flight ones: the
in-flight positions cut the open range into segments, new probes go to the segment with the most suspects
per probe, and each segment with probes is split as above.
"""

from __future__ import annotations

from itertools import accumulate

from bisector.core.strategies.base import Outcome, SearchState, settled_outcome


class KArySearch:
    name = "kary"

    def next_probes(self, state: SearchState, free_slots: int) -> list[int]:
        if free_slots <= 0:
            return []
        slots = free_slots + len(state.in_flight)
        segments = _segments(state, with_ends=slots > 1)
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
        ends = (0, state.size - 1)
        probes: list[int] = []
        for segment, count in zip(segments, assigned, strict=True):
            probes.extend(_split(segment, count, slots + 1, ends))
        return probes

    def outcome(self, state: SearchState) -> Outcome | None:
        return settled_outcome(state)


def part_sizes(suspects: int, probes: int, later_parts: int) -> list[int]:
    """The sizes, from the good end, of the parts that `probes` probes cut `suspects` suspects into, for the
    fewest rounds on average when each later round cuts a part into `later_parts` (at least probes + 1).

    probes + 1 parts, or `suspects` parts of one when there are no more suspects than that.
    """
    parts = probes + 1
    if suspects <= parts:
        return [1] * suspects
    fanout = max(later_parts, parts)
    if fanout == 2:
        half = round(suspects / 2)
        return [half, suspects - half]
    small = 1  # what a full tree with one round fewer than the deepest holds: the largest fanout^k that fits
    while parts * small * fanout <= suspects:
        small *= fanout
    excess, room = suspects - parts * small, small * (fanout - 1)
    sizes = []
    for _ in range(parts):
        extra = min(excess, room)
        sizes.append(small + extra)
        excess -= extra
    ordered = sorted(sizes, reverse=True)
    return ordered[0::2] + ordered[1::2][::-1]  # large at both ends, small in the middle


def rounds_needed(suspects: int, probes: int, later_parts: int) -> int:
    """The fewest rounds that settle `suspects` suspects: `probes` probes now, `later_parts` parts a round later."""
    rounds, capacity = 0, 1
    while capacity < suspects:
        capacity *= probes + 1 if rounds == 0 else max(later_parts, probes + 1)
        rounds += 1
    return rounds


def _split(segment: list[int], count: int, later_parts: int, ends: tuple[int, int]) -> list[int]:
    """`count` probes in a segment, which may hold an endpoint not yet run at either end."""
    inner = [p for p in segment if p not in ends]
    if count >= len(inner):
        return inner  # every commit tested this round; the slots left over can run the endpoints
    if count == 0:
        return []
    if rounds_needed(len(segment) + 1, count, later_parts) > rounds_needed(len(inner) + 1, count, later_parts):
        segment = inner  # counted, it would add a round; left out, its check adds at most that round
    sizes = part_sizes(len(segment) + 1, count, later_parts)
    cuts = [segment[end - 1] for end in accumulate(sizes[:-1])]
    return [p for p in cuts if p not in ends]


def _segments(state: SearchState, *, with_ends: bool) -> list[list[int]]:
    """The untested positions inside the boundary, split at the positions still in flight; `with_ends`: also
    an endpoint at the boundary that has no verdict and is not running (its check may need a slot)."""
    lo, hi = state.boundary()
    first = lo if with_ends and lo == 0 and 0 not in state.verdicts else lo + 1
    last = hi if with_ends and hi == state.size - 1 and hi not in state.verdicts else hi - 1
    segments: list[list[int]] = [[]]
    for p in range(first, last + 1):
        if p in state.in_flight:
            segments.append([])
        elif p not in state.verdicts:
            segments[-1].append(p)
    return [s for s in segments if s]
