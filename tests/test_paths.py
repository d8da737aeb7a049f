"""vocab/paths.py: what a tree below the per-user dirs holds on disk."""

from __future__ import annotations

import os
from pathlib import Path

from bisector.vocab.paths import tree_size


def test_tree_size_counts_files_at_any_depth_and_a_link_as_itself(tmp_path: Path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x" * 100_000)
    tree = tmp_path / "tree"
    (tree / "src" / "deep").mkdir(parents=True)
    (tree / "a.txt").write_bytes(b"12345")
    (tree / "src" / "deep" / "b.bin").write_bytes(b"y" * 4096)
    (tree / "empty").mkdir()
    link = tree / "src" / "to-outside"
    link.symlink_to(outside)
    (tree / "linked-dir").symlink_to(tmp_path, target_is_directory=True)  # neither walked into nor counted
    assert tree_size(tree) == 5 + 4096 + os.lstat(link).st_size
    assert tree_size(tmp_path / "missing") == 0
