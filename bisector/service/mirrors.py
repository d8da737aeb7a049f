"""The server's own clones of the repositories it serves: cloned once, fetched before each job.

A mirror is a git repository with a work tree that is never checked out (GitRepo refuses bare ones; workers add
their own worktrees from it). Its branches and tags follow the source's (`+refs/heads/*:refs/heads/*`), so a
bisect names `main` as the source does. One lock per mirror: concurrent submissions fetch one at a time, and a
fetch that began after a submission arrived serves it too (twenty submissions at once need one or two fetches).
A mirror is made whole or not at all: cloned in a directory beside it and renamed into place once fetched, so a
failed or killed clone leaves no half-made mirror (a partial directory left by a killed server is removed at the
next clone) and the next submission clones again.

A fetch reads the source into a repository of its own (`.git/gpu-bisect-incoming`, made fresh for each fetch, removed
after), which borrows the mirror's objects and so asks the source only for what the mirror lacks; then the mirror
fetches from it, a local copy of those objects and its ref updates. Only that second step waits for the worktree adds
in progress and holds off new ones (GitRepo.worktree_adds_held: a fetch's connectivity check fails on a worktree being
added): a source slow to answer keeps no worker from adding its worktree of the mirror.

Each git command runs in a process group of its own, so that `stop()` (the server stopping) ends it with whatever
it started (the remote's upload-pack, ssh, a credential helper): SIGTERM, then SIGKILL to those still there after
GIT_STOP_GRACE_S. After the stop no git command starts; the sync that was waiting on one fails with one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from bisector.service.config import normalized_source
from bisector.vocab.errors import InputError
from bisector.vocab.gitrepo import StoppableGit
from bisector.vocab.incoming import fetch_through_incoming

REFSPECS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
FETCH_OPTIONS = ("-q", "--prune", "--update-head-ok")
GIT_TIMEOUT_S = 600.0
GIT_STOP_GRACE_S = 5.0  # how long a stopped or timed-out git command may take to end on SIGTERM before SIGKILL
STOP_REASON = "the server is stopping"


class Mirrors:
    def __init__(self, root: Path, allowed: tuple[str, ...]) -> None:
        self.root = root
        self.allowed = tuple(dict.fromkeys(normalized_source(source) for source in allowed))  # once each, in order
        self._locks = {source: threading.Lock() for source in self.allowed}
        self._fetch_started: dict[str, float] = {}  # source -> monotonic start of its last successful fetch
        self._git = StoppableGit(GIT_TIMEOUT_S, GIT_STOP_GRACE_S)

    def allowed_source(self, source: str) -> str:
        """The allowed repository that source names; InputError when the server does not serve it."""
        wanted = normalized_source(source)
        if wanted not in self.allowed:
            raise InputError(f"repository {source!r} is not served here (allowed: {', '.join(self.allowed)})")
        return wanted

    def path(self, source: str) -> Path:
        allowed = self.allowed_source(source)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", allowed.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")) or "repo"
        return self.root / f"{name}-{hashlib.sha256(allowed.encode()).hexdigest()[:12]}"

    def sync(self, source: str) -> Path:
        """The mirror of source, cloned if missing, fetched now. RepoError (one line) when git fails."""
        asked = time.monotonic()
        allowed = self.allowed_source(source)
        path = self.path(allowed)
        with self._locks[allowed]:
            if self._fetch_started.get(allowed, -1.0) >= asked:
                return path  # a fetch that started after this call arrived has just finished
            started = time.monotonic()
            if path.is_dir():
                self._fetch_into_mirror(allowed, path)
            else:
                self._clone(allowed, path)
            self._fetch_started[allowed] = started
        return path

    def stop(self) -> None:
        """End the git commands running now (and whatever they started); refuse to start more."""
        self._git.stop(STOP_REASON)

    def _fetch_into_mirror(self, source: str, path: Path) -> None:
        """Fetch source into the mirror at path through its incoming repository (the module's docstring); the
        incoming repository fetches it as the mirror's remote, by its name."""
        fetch_through_incoming(
            self._git.run, path, source, FETCH_OPTIONS, REFSPECS, REFSPECS, contextlib.nullcontext(), remote="origin"
        )

    def _clone(self, source: str, path: Path) -> None:
        """Make the mirror of source at path whole, or leave nothing there."""
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f".{path.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
        try:
            self._git.run(partial, "init", "-q")
            self._git.run(partial, "remote", "add", "origin", source)
            self._git.run(partial, "fetch", *FETCH_OPTIONS, "origin", *REFSPECS)
            os.rename(partial, path)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
