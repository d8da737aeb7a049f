"""A step's own copy of its image's tree, for its test to run in.

A test writes where it runs (its outputs, a `mkdir out`, a results file), and an image's tree serves every later
step, repeat and bisect at that commit, some of them at once. So each test runs in a copy made for it (`cp -a
--reflink=auto`: copy-on-write where the filesystem has it, XFS or Btrfs, else a plain copy) and removed after it,
as a worktree step starts from a clean checkout. The copies live beside the image (`<id>/runs/`, so the size cap
counts them and removing the image removes them), each marked with its owner: a worker killed mid-step leaves
one behind, which the next copy made of that image removes once the owner is gone.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bisector.vocab.paths import remove_tree
from bisector.vocab.processes import mark_owner, owner_is_gone

RUNS = "runs"


@contextlib.contextmanager
def private_copy(tree: Path) -> Iterator[Path]:
    """A fresh copy of tree for one test, removed when the block ends. OSError when it cannot be made (ENOSPC on
    a full disk)."""
    runs = tree.parent / RUNS
    runs.mkdir(exist_ok=True)
    for left in runs.iterdir():
        if owner_is_gone(left):
            remove_tree(left)
    holder = Path(tempfile.mkdtemp(prefix="run-", dir=runs))
    try:
        mark_owner(holder)
        copy = holder / "tree"
        done = subprocess.run(
            ["cp", "-a", "--reflink=auto", str(tree), str(copy)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            code = errno.ENOSPC if "No space left" in done.stderr else errno.EIO
            raise OSError(code, f"cp -a {tree} {copy}: {done.stderr.strip()[-500:]}")
        yield copy
    finally:
        remove_tree(holder)
