"""A bisect's candidates: the SHAs of its range by position, and the details of the commits described so far.

A range may hold a hundred thousand commits, of which a bisect shows a few dozen: its endpoints, the commits it
tested, its answer and the suspects it leaves, the ends of the range. Only those are described (subject, author,
date and PR read from git when first needed, then stored); any other candidate is its SHA and its position. The
SHAs are kept as git lists them and the store holds them, one text of equal-length lines, so that a long range
costs neither a Python object per commit nor a pass over them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from bisector.vocab.domain import Commit

WHOLE_RANGE_SHOWN = 40  # a range this short is shown whole; a longer one in part (CommitRange.shown)
ENDS_SHOWN = 5  # of a longer range, this many commits at each end


class CommitRange:
    """Position 0 is the good endpoint, then bad's first-parent chain oldest first (the bad endpoint last), then the
    commits of each merged branch descended into that are not listed before them (bisector/core/merges.py): each SHA
    once. Indexing gives the Commit at a position, described where it is."""

    def __init__(self, shas: Iterable[str] = (), described: Iterable[Commit] = ()) -> None:
        self._text = ""  # the SHAs by position, one a line
        self._width = 0  # of a SHA: 40 (SHA-1) or 64 (SHA-256)
        self._count = 0
        self._found: dict[str, int] = {}  # SHA -> position, of the SHAs looked up so far
        self._described: dict[int, Commit] = {}
        self.position: Mapping[str, int] = _Positions(self)
        self.extend_text("\n".join(shas))
        self.describe(described)

    @classmethod
    def of(cls, commits: Sequence[Commit]) -> CommitRange:
        """The range of commits listed at positions 0, 1, 2, ..., as described as they are."""
        return cls([commit.sha for commit in commits], commits)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, position: int) -> Commit:
        """The commit at position (a negative one counts from the end); IndexError outside the range."""
        position = range(self._count)[position]
        return self._described.get(position) or Commit(position, self.sha(position))

    def __contains__(self, sha: object) -> bool:
        return isinstance(sha, str) and self.find(sha) is not None

    def sha(self, position: int) -> str:
        start = position * (self._width + 1)
        return self._text[start : start + self._width]

    def shas(self) -> list[str]:
        """Every SHA, by position (a new list)."""
        return self._text.split("\n") if self._text else []

    def text(self, first_position: int = 0) -> str:
        """The SHAs from first_position on, one a line, as the store keeps them."""
        return self._text[first_position * (self._width + 1) :]

    def find(self, sha: str) -> int | None:
        """The position of a SHA; None outside the range."""
        position = self._found.get(sha)
        if position is None and len(sha) == self._width and "\n" not in sha:
            index = self._text.find(sha)  # a match of a whole line's length with no line break is a whole line
            if index >= 0:
                position = self._found[sha] = index // (self._width + 1)
        return position

    def commit(self, sha: str) -> Commit | None:
        """The candidate with this SHA; None for a commit outside the range."""
        position = self.find(sha)
        return None if position is None else self[position]

    def extend(self, shas: Iterable[str]) -> None:
        """More candidates, numbered after the others."""
        self.extend_text("\n".join(shas))

    def extend_text(self, text: str) -> None:
        """More candidates, numbered after the others: their SHAs one a line (as `git rev-list` prints them). All
        SHAs of a range have one length (ValueError otherwise)."""
        if not text:
            return
        newline, lines = text.find("\n"), text.count("\n") + 1
        width = len(text) if newline < 0 else newline
        equal = len(text) == lines * (width + 1) - 1 and text[width :: width + 1] == "\n" * (lines - 1)
        if not width or not equal or (self._count and width != self._width):
            raise ValueError("the SHAs of a range are one a line, all of one length")
        self._text = f"{self._text}\n{text}" if self._text else text
        self._width, self._count = width, self._count + lines

    def describe(self, commits: Iterable[Commit]) -> None:
        """Note the details of described commits of this range (ValueError for one not at its position here)."""
        for commit in commits:
            if not commit.described:
                continue
            if not (0 <= commit.position < self._count and self.sha(commit.position) == commit.sha):
                raise ValueError(f"{commit.sha[:12]} is not at position {commit.position} of the range")
            self._described[commit.position] = commit

    def described(self) -> list[Commit]:
        """The described commits, by position."""
        return [self._described[position] for position in sorted(self._described)]

    def undescribed(self, positions: Iterable[int]) -> list[Commit]:
        """The commits at these positions of the range that are not described yet, by position, each once."""
        return [self[p] for p in sorted(set(positions)) if p not in self._described and 0 <= p < self._count]

    def shown(self, tested: Iterable[int] = (), first_bad: int | None = None) -> list[int]:
        """The positions a report's table of the range shows: all of a short range; of a longer one its ends, the
        tested positions and the first bad commit with its neighbours."""
        count = self._count
        if count <= WHOLE_RANGE_SHOWN:
            return list(range(count))
        keep = {*range(ENDS_SHOWN), *range(count - ENDS_SHOWN, count), *tested}
        if first_bad is not None:
            keep |= {first_bad - 1, first_bad, first_bad + 1}
        return sorted(p for p in keep if 0 <= p < count)


class _Positions(Mapping[str, int]):
    """SHA -> position over a range, without a dictionary of every SHA."""

    def __init__(self, commits: CommitRange) -> None:
        self._commits = commits

    def __getitem__(self, sha: str) -> int:
        position = self._commits.find(sha)
        if position is None:
            raise KeyError(sha)
        return position

    def __contains__(self, sha: object) -> bool:
        return sha in self._commits

    def __iter__(self) -> Iterator[str]:
        return iter(self._commits.shas())

    def __len__(self) -> int:
        return len(self._commits)
