"""One git command run as a subprocess, as gitrepo.py and submodules.py run theirs (gitrepo.StoppableGit, whose runs a
stop must end, starts its own in sessions of their own)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from bisector.vocab.processes import ended_how

# git's messages in English whatever the user's locale: RepoErrors quote them
GIT_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}
WORKTREE_ADD_LOCK = "gpu-bisect-worktree-add.lock"  # in a repository's git directory: worktree_adds_held


class GitCommandError(Exception):
    """git exited non-zero (or could not start); str() is its stderr on one line, stdout what it printed first."""

    def __init__(self, message: str, stdout: str = "") -> None:
        super().__init__(message)
        self.stdout = stdout


def run_git(
    directory: str | Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    output: IO[bytes] | None = None,
    errors: str = "surrogateescape",
    timeout: float | None = None,
) -> str:
    """`git -C directory args...`: its stdout (one trailing newline dropped, decoded with errors), or into output.
    Raises GitCommandError when git exits non-zero or runs past timeout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *args],
            stdin=subprocess.DEVNULL,
            stdout=output if output is not None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **GIT_LOCALE, **(env or {})},
            check=False,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:  # no git on PATH, or a hung fetch
        raise GitCommandError(f"git {args[0]}: {exc}") from None
    stdout = (done.stdout or b"").decode(errors=errors).removesuffix("\n")
    if done.returncode != 0:
        stderr = " ".join(done.stderr.decode(errors="replace").split())
        raise GitCommandError(stderr or f"git {args[0]} {ended_how(done.returncode)}", stdout)
    return stdout


@contextlib.contextmanager
def worktree_adds_held(git_common_dir: Path) -> Iterator[None]:
    """No worktree of the repository is added (GitRepo, any process) while this is held. `git worktree add` writes
    the new worktree's HEAD as the null object id before it sets it: a git command that reads every worktree's HEAD
    meanwhile (a fetch's connectivity check, `rev-list --all`) fails on it ("bad object")."""
    with (git_common_dir / WORKTREE_ADD_LOCK).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
