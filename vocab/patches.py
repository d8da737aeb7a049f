"""Patches applied on top of every commit a bisect tests (`--cherry-pick REV`, `--patch FILE`), as people do by hand
when the test was added after the good commit or an old commit needs a build fix (`git cherry-pick -n` in a
`git bisect run` script).

What they apply is read once, when the bisect is made, and stored with it: a patch file's text and a revision's SHA,
so a file edited later or a branch that moves changes no running or resumed bisect. The cherry-picks apply first, each
merged three-way as `git cherry-pick -n` merges it, then the patch files as `git apply` applies them, each in the
order given. A commit where they do not apply is skipped with the reason; patches that apply at neither endpoint are
refused.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from bisector.vocab.errors import InputError, RepoError
from bisector.vocab.gitrepo import GitRepo


class PatchError(RepoError):
    """A patch does not apply at a commit (the commit is skipped)."""


class PatchKind(StrEnum):
    COMMIT = "cherry-pick"  # a commit's change to its parent: content is its SHA
    DIFF = "patch"  # a patch file's text: content is the text


@dataclass(frozen=True)
class Patch:
    kind: PatchKind
    source: str  # as given: the revision or the file's path
    content: str  # the commit's SHA, or the patch's text

    @property
    def label(self) -> str:
        """`--cherry-pick REV (SHA)` or `--patch FILE`, as reports and step details name it."""
        if self.kind is PatchKind.COMMIT:
            shown = self.content[:12] if self.source == self.content else f"{self.source} ({self.content[:12]})"
            return f"--cherry-pick {shown}"
        return f"--patch {self.source}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "source": self.source, "content": self.content}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Patch:
        kind, source, content = data.get("kind"), data.get("source"), data.get("content")
        if kind not in tuple(PatchKind) or not isinstance(source, str) or not isinstance(content, str):
            raise InputError(f"patches: {str(dict(data))[:80]} is not a table of kind (patch, cherry-pick), source "
                             "and content")  # fmt: skip
        return cls(PatchKind(str(kind)), source, content)


def apply_command(patch: Patch) -> str:
    """The shell command that applies the patch by hand in a checkout of the commit."""
    if patch.kind is PatchKind.COMMIT:
        return f"git cherry-pick -n {patch.content}"
    return f"printf %s {shlex.quote(patch.content)} | git apply --index"


def patches_digest(patches: Sequence[Patch]) -> str:
    """One hash of what the patches apply, in order (an image's key holds it)."""
    text = json.dumps([[p.kind.value, p.content] for p in patches])
    return hashlib.sha256(text.encode(errors="surrogateescape")).hexdigest()[:16]


def patched_tree(repo: GitRepo, sha: str, patches: Sequence[Patch]) -> str:
    """The tree of sha with the patches applied in order; PatchError naming the patch that does not apply (another
    RepoError where git cannot read the repository)."""
    tree = f"{sha}^{{tree}}"
    for patch in patches:
        try:
            if patch.kind is PatchKind.COMMIT:
                tree = repo.cherry_picked_tree(tree, patch.content)
            else:
                tree = repo.apply_to_tree(tree, patch.content)
        except RepoError as exc:
            raise PatchError(f"{patch.label} does not apply at {sha[:12]}: {exc}") from None
    return tree


def read_patches(repo: GitRepo, cherry_picks: Sequence[str], files: Sequence[str]) -> list[Patch]:
    """The patches as given (revisions of repo, files' paths), read now: InputError for an unknown revision, a merge
    commit, or a file that cannot be read."""
    patches = []
    for rev in cherry_picks:
        try:
            sha = repo.resolve(rev)
        except RepoError:
            raise InputError(f"--cherry-pick {rev}: no such commit in {repo.root}") from None
        parents = repo.parents(sha)
        if len(parents) != 1:
            what = "has no parent" if not parents else "is a merge commit; cherry-pick the commits it merged"
            raise InputError(f"--cherry-pick {rev}: {sha[:12]} {what}")
        patches.append(Patch(PatchKind.COMMIT, rev, sha))
    for name in files:
        try:
            text = Path(name).read_bytes().decode(errors="surrogateescape")
        except OSError as exc:
            raise InputError(f"--patch {name}: cannot read it ({exc.strerror or exc})") from None
        patches.append(Patch(PatchKind.DIFF, name, text))
    return patches


def resolve_patches(repo_root: str | Path, values: Mapping[str, object]) -> dict[str, object]:
    """values (flat options) with `patches` holding what `cherry_pick` and `patch` name (after any `patches` given
    already read, an API's texts), read now and checked at both endpoints (`good` and `bad`, revisions): InputError
    when they apply at neither."""
    picks, files, given = (_listed(values, name) for name in ("cherry_pick", "patch", "patches"))
    if not (picks or files or given):
        return dict(values)
    repo = GitRepo(repo_root)
    patches = [
        *read_patches(repo, [str(rev) for rev in picks], []),
        *map(_read_given, given),
        *read_patches(repo, [], [str(name) for name in files]),
    ]
    failures = []
    for which in ("good", "bad"):
        try:
            patched_tree(repo, repo.resolve(str(values[which])), patches)
        except RepoError as exc:
            failures.append(f"at {which}: {exc}")
    if len(failures) == 2:
        raise InputError(f"the patches apply at neither endpoint ({'; '.join(failures)})")
    return {**values, "patches": [patch.to_json() for patch in patches]}


def _listed(values: Mapping[str, object], name: str) -> list[object]:
    value = values.get(name) or []
    if not isinstance(value, list | tuple):
        raise InputError(f"{name}: expected a list, got {type(value).__name__}")
    return list(value)


def _read_given(item: object) -> Patch:
    if not isinstance(item, Mapping):
        raise InputError("patches: expected a list of tables (kind, source, content)")
    return Patch.from_json(item)
