"""The suspects of a triage: the commits after the good run's commit up to the bad run's, ranked.

The range is the bisect's: bad's first-parent chain after good (`GitRepo.candidates`, oldest first). Ranking,
kept simple so a reader can check it: commits that change a file named by a regression (a traceback's
`File "x.py"` / `x.py:12` lines, the JUnit `file` attribute, the test module from its classname) come
first, more such files first; then newest first (the latest change is the likeliest to still be broken).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from bisector.triage.classify import Failure
from bisector.vocab.domain import Commit
from bisector.vocab.gitrepo import GitRepo

_TRACEBACK_PATH = re.compile(
    r'File "([^"]+)"|([\w./+-]+\.(?:py|pyx|cu|cuh|cpp|cc|c|h|hpp|yaml|yml|json|toml|txt|cfg|ini)):\d+'
)


@dataclass(frozen=True)
class Suspect:
    commit: Commit
    touched: tuple[str, ...]  # files it changes that a regression names

    @property
    def reason(self) -> str:
        if self.touched:
            return "changes " + ", ".join(self.touched[:5]) + (" ..." if len(self.touched) > 5 else "")
        return "in the range"


def named_paths(failures: Iterable[Failure]) -> set[str]:
    """Files that the regressions' tracebacks, JUnit `file` attributes and test modules name."""
    paths: set[str] = set()
    for failure in failures:
        if failure.case is None:
            continue
        for match in _TRACEBACK_PATH.finditer(failure.case.text):
            paths.add(match.group(1) or match.group(2))
        if failure.case.file:
            paths.add(failure.case.file)
        if failure.case.classname:
            parts = failure.case.classname.split(".")
            paths.update("/".join(parts[:end]) + ".py" for end in range(1, len(parts) + 1))
    return {path.removeprefix("./") for path in paths if path}


def rank_suspects(repo: GitRepo, good: str, bad: str, failures: Iterable[Failure]) -> list[Suspect]:
    """The commits of good..bad, ranked as the module doc says; empty when good and bad are one commit."""
    if good == bad:
        return []
    named = named_paths(failures)
    suspects = []
    for commit in repo.candidates(good, bad)[1:]:
        changed = _changed_paths(repo, commit.sha) if named else []
        touched = tuple(path for path in changed if any(_same_file(path, name) for name in named))
        suspects.append(Suspect(commit, touched))
    return sorted(suspects, key=lambda s: (-len(s.touched), -s.commit.position))


def _same_file(changed: str, named: str) -> bool:
    """`named` may be absolute (a CI runner's checkout) or relative to a subdirectory."""
    return changed == named or named.endswith("/" + changed) or changed.endswith("/" + named)


def _changed_paths(repo: GitRepo, sha: str) -> list[str]:
    parents = repo.parents(sha)
    if not parents:
        return []
    paths = []
    for line in repo.diff(parents[0], sha).splitlines():
        if line.startswith("diff --git a/"):
            rest = line.removeprefix("diff --git a/")
            half = (len(rest) - 3) // 2
            paths.append(rest[half + 3 :] if rest[half : half + 3] == " b/" else rest.rsplit(" b/", 1)[-1])
    return paths
