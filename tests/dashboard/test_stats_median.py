"""The median time to culprit of `bisect stats`, taken by the database on PostgreSQL and in Python on SQLite:
the same numbers on both, the mean of the middle two for an even count (as statistics.median)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bisector.db.store import Store
from bisector.report.history import compute_stats, parse_filter
from bisector.vocab.domain import BisectStatus

CREATED = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def _found_bisects(store: Store, repo: str, seconds: list[float]) -> None:
    for took in seconds:
        bisect_id = store.create_bisect(repo, "a" * 40, "b" * 40, {}, CREATED)
        store.set_status(bisect_id, BisectStatus.FOUND, finished=CREATED + timedelta(seconds=took), first_bad="c" * 40)


@pytest.mark.parametrize(
    ("seconds", "median"),
    [([10.0, 20.0, 30.0, 100.0], 25.0), ([7.25, 1.5, 3600.125], 7.25), ([2.5, 0.5], 1.5)],
)
def test_the_median_time_to_culprit_is_the_same_on_every_backend(store_url: str, seconds: list[float], median: float):
    repo = f"/srv/median-{len(seconds)}-{median}"
    with Store.open(store_url) as store:
        _found_bisects(store, repo, seconds)
        (group,) = compute_stats(store, parse_filter(repo=repo)).groups
    assert group.median_time_to_culprit_s == pytest.approx(median, abs=0.001)
    assert group.found == len(seconds)
