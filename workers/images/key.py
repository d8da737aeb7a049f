"""What names an image: the repository, the tree of the recipe's inputs at the commit, the recipe, the base env.

Two commits whose recipe inputs are the same tree get the same key, so the second reuses the first one's image.
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path

from bisector.vocab.errors import InputError, RepoError
from bisector.vocab.gitrepo import GitRepo

IMAGE_MODES = ("none", "venv")  # none: build in the slot's worktree every step (no image)
BASE_PACKAGES = ("torch", "triton", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime")  # versions in the base env
DEFAULT_MAX_BYTES = 20 << 30
_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class ImageRecipe:
    """How a step's image is made: the build command, the paths whose tree decides the key (empty: the whole
    tree), and the cache root's size cap."""

    mode: str = "venv"
    inputs: tuple[str, ...] = ()
    max_bytes: int = DEFAULT_MAX_BYTES
    artifact: str | None = None  # where a commit's prebuilt wheels are ({sha}, {short}): installed instead of a build

    def __post_init__(self) -> None:
        if self.mode not in IMAGE_MODES:
            raise InputError(f"image must be one of {', '.join(IMAGE_MODES)} (got {self.mode!r})")
        for path in self.inputs:
            if not isinstance(path, str) or not path or path.startswith("/") or ".." in Path(path).parts:
                raise InputError(f"image_inputs: {path!r} must be a path inside the repository")
        if self.max_bytes <= 0:
            raise InputError(f"images_max_size must be positive (got {self.max_bytes})")
        if self.artifact is not None:
            self.artifact_at("0" * 40)  # validates the template

    def artifact_at(self, sha: str) -> str | None:
        """The artifact location of the commit: the template with {sha} (and {short}, 12 characters) filled."""
        if self.artifact is None:
            return None
        try:
            return self.artifact.format(sha=sha, short=sha[:12])
        except (KeyError, IndexError, ValueError) as exc:
            raise InputError(
                f"--artifact {self.artifact!r}: only {{sha}} and {{short}} can be filled ({exc})"
            ) from None


@dataclass(frozen=True)
class ImageKey:
    repo: str  # the repository's identity: its origin URL, else its resolved path
    inputs_tree: str  # git's hash of the recipe's inputs at the commit
    recipe: str  # hash of the build command, the mode and the declared inputs
    base_env: dict[str, str] = field(default_factory=dict)  # python, interpreter prefix, torch/triton/CUDA versions

    @property
    def id(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def parse_size(text: str) -> int:
    """'20G', '512M', '1.5T' or a number of bytes."""
    cleaned = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = cleaned[-1:] if cleaned[-1:] in _SIZE_UNITS else ""
    number = cleaned[: len(cleaned) - len(unit)]
    try:
        value = float(number) * _SIZE_UNITS[unit]
    except ValueError:
        raise InputError(f"{text!r} is not a size: write a number of bytes or one like 512M, 20G") from None
    if not value > 0 or value != value:
        raise InputError(f"{text!r} is not a positive size")
    return int(value)


def recipe_hash(build_cmd: str | None, recipe: ImageRecipe) -> str:
    fields: dict[str, object] = {"build": build_cmd or "", "mode": recipe.mode, "inputs": sorted(recipe.inputs)}
    if recipe.artifact is not None:  # absent otherwise: the keys of images made without artifacts stay the same
        fields["artifact"] = recipe.artifact
    text = json.dumps(fields)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def image_key(repo: str, sha: str, build_cmd: str | None, recipe: ImageRecipe) -> ImageKey:
    return ImageKey(
        repo=repository_identity(repo),
        inputs_tree=inputs_tree(repo, sha, recipe.inputs),
        recipe=recipe_hash(build_cmd, recipe),
        base_env=base_environment(),
    )


def inputs_tree(repo: str, sha: str, inputs: tuple[str, ...]) -> str:
    """The tree (or blob) hash of each input at sha, combined; the commit's whole tree when there are none.
    An input absent at sha counts as absent (its own 'missing' mark), not as an error."""
    git_repo = GitRepo(repo)
    if not inputs:
        tree = git_repo.tree_hash(sha)
        if tree is None:
            raise RepoError(f"no commit {sha[:12]} in {repo}")
        return tree
    hashes = [git_repo.tree_hash(sha, path) or "missing" for path in sorted(inputs)]
    listing = "\n".join(f"{path} {tree}" for path, tree in zip(sorted(inputs), hashes, strict=True))
    return hashlib.sha256(listing.encode()).hexdigest()


def repository_identity(repo: str) -> str:
    return GitRepo(repo).origin_url() or str(Path(repo).resolve())


@cache
def base_environment() -> dict[str, str]:
    """The interpreter an image's venv is made from and the versions of the heavy packages it sees from the base
    environment, read from package metadata (torch is not imported)."""
    env = {
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "prefix": sys.prefix,
        "site": sysconfig.get_paths()["purelib"],
    }
    for name in BASE_PACKAGES:
        try:
            env[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return env
