"""Delta debugging (Zeller and Hildebrandt's ddmin): the smallest subset of changes that still fails.

Pure: the caller's test says, for a batch of subsets, which ones fail (reproduce the bad metric); a subset
that cannot be judged counts as not failing. The result is 1-minimal: removing any one change from it makes
the failure go away (as far as the test said).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Subset = frozenset[int]
BatchTest = Callable[[Sequence[Subset]], Sequence[bool]]


class _Tester:
    """Memoised test that runs candidates in batches of `batch` and stops at the first batch with a failure."""

    def __init__(self, test: BatchTest, batch: int) -> None:
        self.test, self.batch = test, max(1, batch)
        self.results: dict[Subset, bool] = {}

    def first_failing(self, candidates: Sequence[Subset]) -> Subset | None:
        for start in range(0, len(candidates), self.batch):
            chunk = candidates[start : start + self.batch]
            todo = [c for c in dict.fromkeys(chunk) if c not in self.results]
            if todo:
                outcomes = self.test(todo)
                if len(outcomes) != len(todo):
                    raise ValueError(f"test returned {len(outcomes)} outcomes for {len(todo)} subsets")
                self.results.update(zip(todo, outcomes, strict=True))
            for candidate in chunk:
                if self.results[candidate]:
                    return candidate
        return None


def ddmin(count: int, test: BatchTest, *, batch: int = 1) -> Subset:
    """Minimise the failing set {0, ..., count-1} (assumed to fail; the empty set assumed to pass).

    batch > 1 hands the test that many subsets at once (to run them in parallel); the result is the same
    as with batch=1 whenever the test is deterministic.
    """
    tester = _Tester(test, batch)
    current = list(range(count))
    granularity = 2
    while len(current) >= 2:
        granularity = min(granularity, len(current))
        parts = _split(current, granularity)
        found = tester.first_failing(parts)
        if found is not None:
            current, granularity = sorted(found), 2
            continue
        if granularity > 2:  # with two parts each complement is the other part, already tested
            found = tester.first_failing([frozenset(current) - part for part in parts])
            if found is not None:
                current, granularity = sorted(found), max(granularity - 1, 2)
                continue
        if granularity >= len(current):
            break
        granularity = min(2 * granularity, len(current))
    return frozenset(current)


def _split(items: list[int], parts: int) -> list[Subset]:
    size, extra = divmod(len(items), parts)
    result: list[Subset] = []
    start = 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        result.append(frozenset(items[start:end]))
        start = end
    return result
