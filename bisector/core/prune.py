"""--prune auto: which candidates can change the test's result, from what a probe at the bad commit saw (the
files and lines it executed, the files it read and the directories it listed, the build's inputs). Pure: the
probe and git are read by bisector/runner/prune_probe.py.

Each commit gets the tree the test can see: the ids of the visible paths it changed (files, and directory
entries added or removed in a listed directory), carried along the first-parent chain. A commit whose visible
tree is an earlier commit's shares that commit's verdict and leaves the search: the commits that touch nothing
visible (the same tree as their parent) and those that restore an earlier one (a revert). The endpoints stay.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from bisector.vocab.gitrepo import PathChange

ABSENT = "0" * 40
MAX_PATHS_SHOWN = 5
DOC_SUFFIXES = (".md", ".rst", ".adoc", ".png", ".jpg", ".jpeg", ".gif", ".svg")  # no program reads them to run
PYTHON_SUFFIXES = (".py", ".pyi")  # read by Python, which the probe follows


class Reach(StrEnum):
    """What of the test a commit touches, most direct first."""

    EXECUTED_LINES = "executed_lines"  # it last changed a line the test executed
    SEEN_FILES = "seen_files"  # it changes a file the test executed or read, or the listing of a directory it listed
    BUILD_INPUTS = "build_inputs"  # it changes a build input (or a file a program the probe cannot follow may read)
    UNSEEN = "unseen"  # nothing the test or build can see


@dataclass(frozen=True)
class Visibility:
    """What the test and its build can see, as repository paths at the bad commit."""

    seen: frozenset[str]  # files executed, opened or named
    listed: frozenset[str] = frozenset()  # directories listed ("" is the root)
    build_prefixes: tuple[str, ...] = ()  # build inputs: a file, or a directory and what it holds
    build_files: frozenset[str] = frozenset()  # build inputs: the files the traced build opened, looked up or ran
    unfollowed: bool = False  # programs the probe cannot follow ran: they may read any file but the exempt ones
    exempt: tuple[str, ...] = DOC_SUFFIXES + PYTHON_SUFFIXES
    line_authors: frozenset[str] = frozenset()  # commits that last changed a line the test executed

    def reach(self, change: PathChange) -> Reach:
        if change.tree:
            listed = change.status in "AD" and posixpath.dirname(change.path) in self.listed
            return Reach.SEEN_FILES if listed else Reach.UNSEEN
        if change.path in self.seen or (change.status in "AD" and posixpath.dirname(change.path) in self.listed):
            return Reach.SEEN_FILES
        if change.path in self.build_files or any(
            change.path == p or change.path.startswith(p.rstrip("/") + "/") for p in self.build_prefixes
        ):
            return Reach.BUILD_INPUTS
        if self.unfollowed and not change.path.endswith(self.exempt):
            return Reach.BUILD_INPUTS
        return Reach.UNSEEN


@dataclass(frozen=True)
class CommitReach:
    reach: Reach
    same_as: str | None = None  # the earlier commit with the same visible tree: its verdict is this one's
    paths: tuple[str, ...] = ()  # the visible paths it changes (the first MAX_PATHS_SHOWN)

    def to_json(self) -> dict[str, object]:
        return {"reach": self.reach.value, "same_as": self.same_as, "paths": list(self.paths)}

    @classmethod
    def from_json(cls, data: object) -> CommitReach | None:
        if not isinstance(data, Mapping) or data.get("reach") not in tuple(Reach):
            return None
        same_as, paths = data.get("same_as"), data.get("paths")
        return cls(
            Reach(str(data["reach"])),
            same_as if isinstance(same_as, str) else None,
            tuple(str(p) for p in paths) if isinstance(paths, list) else (),
        )


@dataclass(frozen=True)
class PrunePlan:
    """The classification of the candidates, and whether the search uses it (note: what it pruned, or why not)."""

    applied: bool
    note: str
    commits: Mapping[str, CommitReach] = field(default_factory=dict)  # sha -> reach, every candidate but good

    def removed(self) -> frozenset[str]:
        """The commits that leave the search (their verdict is their same_as commit's)."""
        if not self.applied:
            return frozenset()
        return frozenset(sha for sha, reach in self.commits.items() if reach.same_as is not None)

    def to_json(self) -> dict[str, object]:
        commits = {sha: reach.to_json() for sha, reach in self.commits.items()}
        return {"applied": self.applied, "note": self.note, "commits": commits}

    @classmethod
    def from_json(cls, data: object) -> PrunePlan | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("note"), str):
            return None
        commits = data.get("commits")
        stored = commits.items() if isinstance(commits, Mapping) else ()
        read = {str(sha): CommitReach.from_json(c) for sha, c in stored}
        return cls(data.get("applied") is True, str(data["note"]), {s: r for s, r in read.items() if r is not None})


def unpruned(why: str) -> PrunePlan:
    return PrunePlan(False, f"not pruned: {why}; every commit is searched")


def plan_pruning(shas: Sequence[str], changes: Mapping[str, Sequence[PathChange]], visibility: Visibility) -> PrunePlan:
    """shas: the candidates, good first, bad last; changes: what each changed against its first parent.

    The probe names paths as they are at the bad commit, so a file that a later commit of the range deletes counts as
    seen: its content may live on under another name (a rename, a move) that the test reads."""
    moved = frozenset(c.path for sha in shas for c in changes.get(sha, ()) if c.status == "D" and not c.tree)
    visibility = replace(visibility, seen=visibility.seen | moved)
    representative: dict[frozenset[tuple[str, str]], str] = {}
    base: dict[str, str] = {}  # visible path -> its id at good (the first time a commit changes it)
    state: dict[str, str] = {}
    commits: dict[str, CommitReach] = {}
    keys: list[frozenset[tuple[str, str]]] = []
    for index, sha in enumerate(shas):
        visible = [(c, r) for c in changes.get(sha, ()) if (r := visibility.reach(c)) is not Reach.UNSEEN]
        for change, _ in visible:
            path = change.path + ("/" if change.tree else "")
            new = ("absent" if change.new == ABSENT else "present") if change.tree else change.new
            if path not in base:
                base[path] = ("absent" if change.old == ABSENT else "present") if change.tree else change.old
            state[path] = new
        key = frozenset((path, value) for path, value in state.items() if base[path] != value)
        keys.append(key)
        if index == 0:
            representative[key] = sha
            continue
        reach = min((r for _, r in visible), key=list(Reach).index, default=Reach.UNSEEN)
        if sha in visibility.line_authors and visible:
            reach = Reach.EXECUTED_LINES
        paths = tuple(dict.fromkeys(c.path for c, _ in visible))[:MAX_PATHS_SHOWN]
        last = index == len(shas) - 1
        same_as = None if last else representative.get(key)
        representative.setdefault(key, sha)
        commits[sha] = CommitReach(reach, same_as, paths)
    if len(keys) > 1 and keys[0] == keys[-1]:
        return PrunePlan(False, "not pruned: the test and build see the same tree at the good and bad commits, so "
                         "the probe missed what differs; every commit is searched", commits)  # fmt: skip
    unseen = sum(1 for c in commits.values() if c.same_as is not None and c.reach is Reach.UNSEEN)
    same = sum(1 for c in commits.values() if c.same_as is not None) - unseen
    kept = len(shas) - unseen - same
    note = (
        f"pruned {unseen + same} of {len(shas)} commits: {unseen} touch nothing the test or build can see, {same} "
        f"restore a tree the test saw at an earlier commit (its verdict reused); {kept} searched"
    )
    return PrunePlan(True, note, commits)
