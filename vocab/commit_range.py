"""A bisect's candidates: the SHAs of its range by position, and the details of the commits described so far.

A range may hold a hundred thousand commits, of which a bisect shows a few dozen: its endpoints, the commits it
tested, its answer and the suspects it leaves, the ends of the range. Only those are described (subject, author,
date and PR read from git when first needed, then stored); any other candidate is its SHA and its position.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bisector.vocab.domain import Commit

WHOLE_RANGE_SHOWN = 40  # a range this short is shown whole; a longer one in part (CommitRange.shown)
ENDS_SHOWN = 5  # of a longer range, this many commits at each end


class CommitRange:
    """Position 0 is the good endpoint, then bad's first-parent chain oldest first (the bad endpoint last), then the
    commits of each merged branch descended into. Indexing gives the Commit at a position, described where it is."""

    def __init__(self, shas: Iterable[str] = (), described: Iterable[Commit] = ()) -> None:
        self.shas: list[str] = []
        self.position: dict[str, int] = {}  # SHA -> its position
        self._described: dict[int, Commit] = {}
        self.extend(shas)
        self.describe(described)

    @classmethod
    def of(cls, commits: Sequence[Commit]) -> CommitRange:
        """The range of commits listed at positions 0, 1, 2, ..., as described as they are."""
        return cls([commit.sha for commit in commits], commits)

    def __len__(self) -> int:
        return len(self.shas)

    def __getitem__(self, position: int) -> Commit:
        """The commit at position (a negative one counts from the end); IndexError outside the range."""
        position = range(len(self.shas))[position]
        return self._described.get(position) or Commit(position, self.shas[position])

    def __contains__(self, sha: object) -> bool:
        return sha in self.position

    def commit(self, sha: str) -> Commit | None:
        """The candidate with this SHA; None for a commit outside the range."""
        position = self.position.get(sha)
        return None if position is None else self[position]

    def extend(self, shas: Iterable[str]) -> None:
        """More candidates, numbered after the others."""
        start = len(self.shas)
        self.shas.extend(shas)
        self.position.update(zip(self.shas[start:], range(start, len(self.shas)), strict=True))

    def describe(self, commits: Iterable[Commit]) -> None:
        """Note the details of described commits of this range (ValueError for one not at its position here)."""
        for commit in commits:
            if not commit.described:
                continue
            if not (0 <= commit.position < len(self.shas) and self.shas[commit.position] == commit.sha):
                raise ValueError(f"{commit.sha[:12]} is not at position {commit.position} of the range")
            self._described[commit.position] = commit

    def described(self) -> list[Commit]:
        """The described commits, by position."""
        return [self._described[position] for position in sorted(self._described)]

    def undescribed(self, positions: Iterable[int]) -> list[Commit]:
        """The commits at these positions of the range that are not described yet, by position, each once."""
        return [self[p] for p in sorted(set(positions)) if p not in self._described and 0 <= p < len(self.shas)]

    def shown(self, tested: Iterable[int] = (), first_bad: int | None = None) -> list[int]:
        """The positions a report's table of the range shows: all of a short range; of a longer one its ends, the
        tested positions and the first bad commit with its neighbours."""
        count = len(self.shas)
        if count <= WHOLE_RANGE_SHOWN:
            return list(range(count))
        keep = {*range(ENDS_SHOWN), *range(count - ENDS_SHOWN, count), *tested}
        if first_bad is not None:
            keep |= {first_bad - 1, first_bad, first_bad + 1}
        return sorted(p for p in keep if 0 <= p < count)
