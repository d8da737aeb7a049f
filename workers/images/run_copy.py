"""A step's own copy of its image's tree and venv, for its test to run in and with.

A test writes where it runs (its outputs, a `mkdir out`, a results file) and may write into its venv (a `pip
install`, a file beside its python), and an image serves every later step, repeat and bisect at that commit, some of
them at once. So each test gets a copy of the image's src/ and venv/ made for it (`cp -a --reflink=auto`:
copy-on-write where the filesystem has it, XFS or Btrfs, else a plain copy) and removed after it, as a worktree step
starts from a clean checkout. The image's text files and links that name its folder (the venv's scripts, `activate`,
`.pth` files, editable installs' finders: listed by its record, workers/images/contents.py) are rewritten in the copy
to name the copy (from the folder the record says they name: the cache root may have moved since), and so is the
image's environment (VIRTUAL_ENV, PATH, BISECT_IMAGE_PYTHON, BISECT_IMAGE_DIR). Triton's and Inductor's caches stay
the image's, shared by design.

The copies live beside the image (`<id>/runs/`, so the size cap counts them and removing the image removes them),
each marked with its owner: a worker killed mid-step leaves one behind, which the next copy made of that image
removes once the owner is gone.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bisector.vocab.paths import remove_tree
from bisector.vocab.processes import mark_owner, owner_is_gone
from bisector.workers.images.builder import PreparedImage
from bisector.workers.images.cache import RUNS
from bisector.workers.images.contents import RECORDED
from bisector.workers.images.transfer import relocate_listed


@dataclass(frozen=True)
class RunCopy:
    tree: Path  # where the test runs: the copy of the image's tree with its build outputs
    env: dict[str, str]  # the image's environment (PreparedImage.env) naming the copy's tree and venv


@contextlib.contextmanager
def private_copy(image: PreparedImage) -> Iterator[RunCopy]:
    """A fresh copy of a ready image's tree and venv for one test, removed when the block ends. OSError when it
    cannot be made (ENOSPC on a full disk)."""
    assert image.run_dir is not None
    folder = image.run_dir.parent
    runs = folder / RUNS
    runs.mkdir(exist_ok=True)
    for left in runs.iterdir():
        if owner_is_gone(left):
            remove_tree(left)
    holder = Path(tempfile.mkdtemp(prefix="run-", dir=runs))
    try:
        mark_owner(holder)
        parts = [str(folder / part) for part in RECORDED if (folder / part).exists()]
        done = subprocess.run(
            ["cp", "-a", "--reflink=auto", *parts, str(holder)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            code = errno.ENOSPC if "No space left" in done.stderr else errno.EIO
            raise OSError(code, f"cp -a {' '.join(parts)} {holder}: {done.stderr.strip()[-500:]}")
        env = dict(image.env)
        named = image.named_folder or str(folder)
        for part in RECORDED:
            relocate_listed(holder, image.naming_folder, f"{named}/{part}", str(holder / part))
            env = {name: value.replace(str(folder / part), str(holder / part)) for name, value in env.items()}
        yield RunCopy(holder / "src", env)
    finally:
        remove_tree(holder)
