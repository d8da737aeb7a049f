"""The details (subject, author, date, PR) of the commits a bisect shows, read from git when the coordinator first
needs them and stored, so that reports and the dashboard show them on any host: a commit's before its first step
is stored, a person's verdict's when the search takes it in, the answer's neighbours and suspects before the
answer is stored (vocab/commit_range.py says which commits are shown)."""

from __future__ import annotations

from collections.abc import Iterable

from bisector.db.store import Store
from bisector.vocab.commit_range import CommitRange
from bisector.vocab.gitrepo import GitRepo


class CommitDetails:
    def __init__(self, store: Store, bisect_id: int, repo: str, candidates: CommitRange) -> None:
        """candidates: the search's own range, which learns the details too."""
        self.store = store
        self.bisect_id = bisect_id
        self.repo_path = repo
        self.candidates = candidates
        self._repo: GitRepo | None = None

    def ensure(self, positions: Iterable[int]) -> None:
        """Describe the candidates at these positions that are not described yet: one git process and one
        transaction, none when all are."""
        commits = self.candidates.undescribed(positions)
        if not commits:
            return
        if self._repo is None:
            self._repo = GitRepo(self.repo_path)
        described = self._repo.describe(commits)
        self.store.describe(self.bisect_id, described)
        self.candidates.describe(described)
