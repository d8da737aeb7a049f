"""Git held at a chosen moment (a worktree add in another process, a remote's answer to a fetch), to show what a racing
git command meets there."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from bisect_helpers import cli_env

WAIT_S = 120.0  # only ends a hung test; no speed target


# A `git` that git runs its own git children through (GIT_EXEC_PATH): `git worktree add` stops where it has written the
# new worktree's HEAD as the null id and runs `git update-ref HEAD` to set it, until $RELEASED exists.
HOLDS_WORKTREE_ADD = """#!/bin/sh
if [ "$1" = update-ref ]; then
    : > "$HELD"
    while [ ! -e "$RELEASED" ]; do sleep 0.02; done
fi
GIT_EXEC_PATH='{exec_path}' exec '{exec_path}/git' "$@"
"""


@contextlib.contextmanager
def worktree_add_held_at_its_null_head(repo: Path, slot: Path, scratch: Path, rev: str = "main") -> Iterator[None]:
    """A worker process's GitRepo.ensure_worktree of a new worktree of repo at rev, held inside its `git worktree
    add`."""
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip()
    wrapper = scratch / "git-exec-path"
    wrapper.mkdir()
    (wrapper / "git").write_text(HOLDS_WORKTREE_ADD.format(exec_path=exec_path))
    (wrapper / "git").chmod(0o755)
    held, released = scratch / "held", scratch / "released"
    adds = "import sys; from pathlib import Path; from bisector.vocab.gitrepo import GitRepo; " \
        "GitRepo(sys.argv[1]).ensure_worktree(Path(sys.argv[2]), sys.argv[3])"  # fmt: skip
    env = cli_env(GIT_EXEC_PATH=str(wrapper), HELD=str(held), RELEASED=str(released))
    worker = subprocess.Popen([sys.executable, "-c", adds, str(repo), str(slot), rev], env=env)
    try:
        deadline = time.monotonic() + WAIT_S
        while not held.exists():
            assert worker.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield
    finally:
        released.touch()
        assert worker.wait(WAIT_S) == 0


def waits_on(lock: Path) -> bool:
    """Whether a process waits for the flock on lock (Linux's /proc/locks lists a waiter after "->")."""
    if not lock.exists():
        return False
    waiters = [line.split() for line in Path("/proc/locks").read_text().splitlines() if " -> " in line]
    return any(fields[6].endswith(f":{lock.stat().st_ino}") for fields in waiters)


# git's hook for the pack-objects of an upload-pack (global config only): the first one, a remote's answer to the
# first fetch, waits until $RELEASED exists, as a remote that is slow to answer
HOLDS_THE_FIRST_ANSWER = """#!/bin/sh
if mkdir "$HELD" 2>/dev/null; then
    while [ ! -e "$RELEASED" ]; do sleep 0.02; done
fi
exec "$@"
"""


@contextlib.contextmanager
def first_fetch_answer_held(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[Future[object]], None]]:
    """The first answer any remote gives a fetch of this process's git commands waits until the block ends. Yields
    a wait: it returns once the fetch that future runs is being held there (and fails if that fetch ended first)."""
    hook, held, released = scratch / "hold.sh", scratch / "held", scratch / "released"
    hook.write_text(HOLDS_THE_FIRST_ANSWER)
    hook.chmod(0o755)
    (scratch / "gitconfig").write_text(f"[uploadpack]\n\tpackObjectsHook = {hook}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(scratch / "gitconfig"))
    monkeypatch.setenv("HELD", str(held))
    monkeypatch.setenv("RELEASED", str(released))

    def until_held(fetching: Future[object]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not held.exists():
            assert not fetching.done(), fetching.result()
            assert time.monotonic() < deadline
            time.sleep(0.02)

    try:
        yield until_held
    finally:
        released.touch()


def killed_in_reference_transaction(
    repo: Path, condition: str, scratch: Path, argv: list[str], **popen: object
) -> None:
    """Start argv (in a session of its own) and SIGKILL its whole session while a git command under it waits in
    repo's reference-transaction hook where the shell test condition holds; the hook is removed after."""
    holding = scratch / "holding"
    hook = repo / ".git/hooks/reference-transaction"
    hook.write_text(f"#!/bin/sh\n{condition} && touch {holding} && sleep 600\nexit 0\n")
    hook.chmod(0o755)
    process = subprocess.Popen(argv, start_new_session=True, **popen)  # type: ignore[call-overload]
    deadline = time.monotonic() + WAIT_S
    while not holding.exists():
        assert process.poll() is None, f"{argv[0]} ended before git reached its reference-transaction hook"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    hook.unlink()
