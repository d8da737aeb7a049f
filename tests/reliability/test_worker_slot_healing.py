"""A step that breaks its slot's worktree: the slot heals before the next step, for this bisect and later ones
sharing the cache, and no commit is blamed for it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from synthetic import culprit_history
from worker_steps import run_one, step_request

from bisector.vocab.domain import ErrorKind, Verdict
from bisector.workers.inprocess import InProcessExecutor
from bisector.workers.local import LocalExecutor

BREAKAGES = {
    "the worktree's .git removed": "rm -rf .git",
    "the worktree directory removed": 'rm -rf "$PWD"',
    "git's record of the worktree removed": 'rm -rf "$(git rev-parse --absolute-git-dir)"',
    ".git replaced by a directory": "rm -rf .git && mkdir .git",
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_slot_a_step_broke_is_made_again_before_the_next_step(tmp_path: Path, breakage: str):
    history = culprit_history(tmp_path / "repo", 6, 3)
    logs = tmp_path / "logs"
    with LocalExecutor(str(history.path), workers=1) as executor:
        broke = run_one(executor, step_request(history, 1, 1, f"{BREAKAGES[breakage]} && echo broke", logs))
        later = [run_one(executor, step_request(history, i, i, "bash test.sh", logs)) for i in (2, 3, 4)]
        again = run_one(executor, step_request(history, 5, 5, "cat counter.txt", logs))
    assert broke.verdict is Verdict.GOOD  # its run was complete, at the right commit
    assert [r.verdict for r in later] == [Verdict.GOOD, Verdict.BAD, Verdict.BAD], [r.detail for r in later]
    assert again.verdict is Verdict.GOOD, again.detail
    assert Path(again.log_path).read_text().rstrip().endswith("5")  # the checkout is that commit's


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_later_bisect_sharing_the_cache_heals_the_slot(tmp_path: Path, breakage: str):
    history = culprit_history(tmp_path / "repo", 4, 2)
    logs = tmp_path / "logs"
    with LocalExecutor(str(history.path), workers=1) as executor:
        run_one(executor, step_request(history, 1, 1, BREAKAGES[breakage], logs))
    with LocalExecutor(str(history.path), workers=1) as executor:
        later = run_one(executor, step_request(history, 2, 3, "bash test.sh", logs))
    with InProcessExecutor(str(history.path), workers=1) as executor:
        run_one(executor, step_request(history, 3, 1, BREAKAGES[breakage], logs))
        threaded = run_one(executor, step_request(history, 4, 0, "bash test.sh", logs))
    assert (later.verdict, later.error_kind) == (Verdict.BAD, None), later.detail
    assert (threaded.verdict, threaded.error_kind) == (Verdict.GOOD, None), threaded.detail


def test_a_slot_that_cannot_be_healed_is_a_harness_error_and_the_worker_serves_on(tmp_path: Path):
    """A mount over the slot's directory: the slot looks empty (broken) and its directory cannot be removed."""
    history = culprit_history(tmp_path / "repo", 4, 2)
    logs = tmp_path / "logs"
    with LocalExecutor(str(history.path), workers=1) as executor:
        first = run_one(executor, step_request(history, 1, 0, "bash test.sh", logs))
        slot = Path(first.log_path).read_text().split("# worktree ", 1)[1].split("\n", 1)[0]
        mounted = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", slot], capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount over the slot here: {mounted.stderr.strip()}")
        try:
            stuck = run_one(executor, step_request(history, 2, 3, "bash test.sh", logs))
        finally:
            subprocess.run(["umount", "-l", slot], check=True)  # lazily: the worker may be tidying the slot
        after = run_one(executor, step_request(history, 3, 3, "bash test.sh", logs))
    assert (stuck.verdict, stuck.error_kind) == (Verdict.ERROR, ErrorKind.HARNESS), stuck.detail
    assert stuck.detail.startswith(f"harness failed checking out {history.shas[3][:12]} in {slot}: making the worktree")
    assert (after.verdict, after.error_kind) == (Verdict.BAD, None), after.detail
