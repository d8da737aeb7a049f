"""Real git histories for the analysis tests, built commit by commit (imported by name: a unique module name,
since every tests directory is on sys.path)."""

from __future__ import annotations

import functools
import os
import subprocess
import textwrap
from pathlib import Path

from bisector.analysis.findings import Finding

_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Dev",
    "GIT_AUTHOR_EMAIL": "dev@example.com",
    "GIT_COMMITTER_NAME": "Test Dev",
    "GIT_COMMITTER_EMAIL": "dev@example.com",
}


class History:
    """A repository to which each commit() writes, removes or renames files and returns the new SHA."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._clock = 1_700_000_000
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        env = {**os.environ, **_IDENTITY, "GIT_AUTHOR_DATE": f"{self._clock} +0000"}
        env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"]
        done = subprocess.run(["git", *args], cwd=self.path, env=env, check=True, capture_output=True, text=True)
        return done.stdout.strip()

    def commit(
        self,
        message: str,
        files: dict[str, str | bytes | None] | None = None,
        *,
        renames: dict[str, str] | None = None,
        executable: tuple[str, ...] = (),
    ) -> str:
        """files: path -> text (dedented), bytes, or None to delete; renames: old path -> new path (git mv)."""
        for old, new in (renames or {}).items():
            (self.path / new).parent.mkdir(parents=True, exist_ok=True)
            self.git("mv", old, new)
        for name, content in (files or {}).items():
            target = self.path / name
            if content is None:
                self.git("rm", "-q", name)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(textwrap.dedent(content))
            if name in executable:
                target.chmod(0o755)
            self.git("add", name)
        self._clock += 60
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def tree(self, rev: str) -> str:
        return self.git("rev-parse", f"{rev}^{{tree}}")


def rules_rows(path: Path, sha: str) -> list[tuple[str, str]]:
    """(kind, name) of the commit's table rows that the specific rules give: not the rows of last resort
    (changed_branches.py), which name any host function whose branch tests changed."""
    from bisector.analysis.changed_branches import LAST_RESORT_KEYS

    return sorted({(row.kind.value, row.name) for row in _table_rows(path, sha) if row.key not in LAST_RESORT_KEYS})


def last_resort_functions(path: Path, sha: str) -> list[str]:
    """The functions the commit's rows of last resort name (changed_branches.py)."""
    from bisector.analysis.changed_branches import LAST_RESORT_KEYS

    return sorted(row.name for row in _table_rows(path, sha) if row.key in LAST_RESORT_KEYS)


@functools.lru_cache(maxsize=4)
def _table_rows(path: Path, sha: str) -> tuple[Finding, ...]:
    """The commit's static-diff rows, diffed once for the two questions above (a commit id names its content)."""
    from bisector.analysis import explain

    return explain(path, sha).table_findings
