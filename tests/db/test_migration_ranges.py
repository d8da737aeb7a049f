"""Migration 0009 (ranges): a store made before it, which holds every candidate with its details, keeps every bisect
readable (its candidates, the dashboard's queries, its report), on SQLite and PostgreSQL; a downgrade gives the
candidates never described rows again."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bisect_helpers import synthetic_spec
from sqlalchemy import insert, select

from bisector.db import Store
from bisector.db.engine import make_engine
from bisector.db.queries import BisectFilter, list_bisects
from bisector.db.schema import bisects, candidates
from bisector.report.json_report import report_json
from bisector.report.model import BisectReport
from bisector.vocab.commit_range import CommitRange
from bisector.vocab.domain import BisectStatus, Commit

T0 = datetime(2026, 11, 2, 3, 4, 5, tzinfo=UTC)
BEFORE = "0007_gpu_seconds"


def history(count: int) -> list[Commit]:
    return [
        Commit(i, f"{i:040x}", f"change {i} (#{100 + i})", f"Dev {i % 3} <dev@example.com>", T0 + timedelta(hours=i),
               100 + i)
        for i in range(count)
    ]  # fmt: skip


def test_an_older_store_keeps_its_bisects_readable(store_url: str, migrate: Callable[..., None]) -> None:
    migrate(store_url, BEFORE)
    commits = history(45)
    culprit = commits[30]
    spec = json.dumps(synthetic_spec(Path("/src/repo"), commits[0].sha, commits[-1].sha).to_json())
    engine = make_engine(store_url)
    try:
        with engine.begin() as conn:  # as 0007's store wrote them: every candidate with its details
            conn.execute(
                insert(bisects).values(
                    id=1, repo="/src/repo", good=commits[0].sha, bad=commits[-1].sha, spec=spec,
                    status=BisectStatus.FOUND.value, created=T0, finished=T0 + timedelta(minutes=5),
                    first_bad=culprit.sha, last_good=commits[29].sha, message="found", extra="{}", metric="exit code",
                )
            )  # fmt: skip
            rows = [{"bisect_id": 1, **vars(c)} for c in reversed(commits)]
            conn.execute(insert(candidates), rows)
    finally:
        engine.dispose()

    with Store.open(store_url) as store:
        stored = store.candidates(1)
        assert stored.shas() == [c.sha for c in commits]
        assert stored.described() == commits
        with store.reading() as conn:
            [summary] = list_bisects(conn, BisectFilter(culprit_pr=culprit.pr), 10)
        assert (summary.culprit_subject, summary.culprit_author) == (culprit.subject, culprit.author)
        report = report_json(BisectReport.load(store, 1))
    assert report["candidates"] == 45
    assert report["first_bad"]["subject"] == culprit.subject  # type: ignore[index]


def test_a_downgrade_gives_every_candidate_a_row_again(store_url: str, migrate: Callable[..., None]) -> None:
    commits = history(6)
    with Store.open(store_url) as store:
        bisect_id = store.create_bisect("/src/repo", commits[0].sha, commits[-1].sha, {}, T0)
        store.add_candidates(bisect_id, CommitRange([c.sha for c in commits], [commits[0], commits[5]]))
    migrate(store_url, BEFORE, down=True)
    engine = make_engine(store_url)
    try:
        with engine.connect() as conn:
            query = select(candidates.c.position, candidates.c.sha, candidates.c.subject, candidates.c.date)
            rows = conn.execute(query.where(candidates.c.bisect_id == bisect_id).order_by("position")).all()
    finally:
        engine.dispose()
    assert [(position, sha) for position, sha, _, _ in rows] == [(c.position, c.sha) for c in commits]
    assert [subject for _, _, subject, _ in rows] == [commits[0].subject, "", "", "", "", commits[5].subject]
    assert rows[2][3].replace(tzinfo=UTC) == T0  # SQLite reads it back without its offset

    with Store.open(store_url) as store:  # up again: all of them stored as described, as any older store's
        assert store.candidates(bisect_id).shas() == [c.sha for c in commits]
        assert len(store.candidates(bisect_id).described()) == 6
