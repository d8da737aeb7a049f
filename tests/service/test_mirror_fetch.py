"""A mirror's fetch from its source holds off no worktree add of the mirror while it waits on the source: only its
short local step, which takes the fetched commits into the mirror, runs under the mirror's worktree-add lock."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from git_holds import WAIT_S, first_fetch_answer_held, waits_on
from images.image_repo import commit, init_repo

from bisector.service.mirrors import Mirrors
from bisector.vocab.gitcommand import WORKTREE_ADD_LOCK
from bisector.vocab.gitrepo import GitRepo


def test_a_slot_of_the_mirror_is_added_while_its_fetch_waits_on_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "source"
    init_repo(source)
    before = commit(source, "one", {"f": "1\n"})
    mirrors = Mirrors(tmp_path / "mirrors", (str(source),))
    mirror = mirrors.sync(str(source))
    newer = commit(source, "two", {"f": "2\n"})
    slot = tmp_path / "slots" / "slot-0"
    with ThreadPoolExecutor(2) as threads:
        with first_fetch_answer_held(tmp_path, monkeypatch) as until_held:
            synced = threads.submit(mirrors.sync, str(source))
            until_held(synced)
            added = threads.submit(GitRepo(mirror).ensure_worktree, slot, "main")
            deadline = time.monotonic() + WAIT_S
            while not added.done() and not waits_on(mirror / ".git" / WORKTREE_ADD_LOCK):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert added.done(), "the worktree add waits for the fetch"
            added.result()
        assert synced.result() == mirror
    head = subprocess.run(["git", "-C", str(slot), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    assert (head.stdout.strip(), GitRepo(mirror).resolve("main")) == (before, newer)
