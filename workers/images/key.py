"""What names an image: the repository, the tree of the recipe's inputs at the commit, the recipe, the base env
(with the architectures of the GPUs its build saw).

Two commits whose recipe inputs are the same tree get the same key, so the second reuses the first one's image.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path

from bisector.vocab.errors import RepoError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.images import DEFAULT_MAX_BYTES, IMAGE_MODES, ImageRecipe, parse_size
from bisector.vocab.patches import Patch, patches_digest

__all__ = [
    "DEFAULT_MAX_BYTES", "IMAGE_MODES", "ImageKey", "ImageRecipe", "container_recipe", "image_key", "parse_size",
    "recipe_hash",
]  # fmt: skip

BASE_PACKAGES = ("torch", "triton", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime")  # versions in the base env
GPU_ARCH = "gpu_arch"  # base_env's entry: the compute capabilities of the GPUs the build saw ("8.0,9.0"), where any


@dataclass(frozen=True)
class ImageKey:
    repo: str  # the repository's identity: its origin URL, else its resolved path
    inputs_tree: str  # git's hash of the recipe's inputs at the commit
    recipe: str  # hash of the build command, the mode, the declared inputs, the artifact, the patches and the env
    base_env: dict[str, str] = field(default_factory=dict)  # python, interpreter prefix, torch/triton/CUDA versions,
    # and GPU_ARCH where the build saw GPUs: it compiles for them, so a build that saw others makes another image

    @functools.cached_property
    def id(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def on_any_gpu(self) -> ImageKey:
        """This key without the GPU architectures its build saw: one key for the images of one build on any host."""
        return replace(self, base_env={name: value for name, value in self.base_env.items() if name != GPU_ARCH})


def any_gpu_id(key: Mapping[str, object], image_id: str) -> str:
    """The id of key (an ImageKey's to_json(), image_id's) without its GPU architectures (ImageKey.on_any_gpu);
    image_id itself where key is not an image key (a container image's)."""
    try:
        return ImageKey(**key).on_any_gpu().id  # type: ignore[arg-type]
    except TypeError:
        return image_id


def recipe_hash(build_cmd: str | None, recipe: ImageRecipe) -> str:
    fields: dict[str, object] = {"build": build_cmd or "", "mode": recipe.mode, "inputs": sorted(recipe.inputs)}
    if recipe.artifact is not None:  # absent otherwise: the keys of images made without artifacts stay the same
        fields["artifact"] = recipe.artifact
    if recipe.patches:  # likewise: an image of patched trees never serves a step without them, nor the reverse
        fields["patches"] = patches_digest(recipe.patches)
    if recipe.env:  # likewise: the build sees the spec's env, so an image made under other values is another build
        fields["env"] = sorted(recipe.env)
    text = json.dumps(fields)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def container_recipe(build_cmd: str | None, patches: tuple[Patch, ...], env: Mapping[str, str]) -> str:
    """The recipe hash of the container images gpu-bisect builds for a spec (their tags hold it): a venv image's
    recipe of the same build, patches and env, so that an image of either kind is reused for the same builds."""
    return recipe_hash(build_cmd, ImageRecipe("none", patches=patches, env=tuple(sorted(env.items()))))


def image_key(
    repo: str,
    sha: str,
    build_cmd: str | None,
    recipe: ImageRecipe,
    opened: GitRepo | None = None,
    gpu_archs: Sequence[str] = (),
) -> ImageKey:
    """opened: repo opened already (not opened again here). gpu_archs: the compute capabilities of the GPUs the build
    sees (workers/gpus.py gpu_architectures), in the key only where there are any: the key of a build that sees no
    GPU is the one it has without that entry, so the images kept on hosts without GPUs stay found."""
    git_repo = opened or GitRepo(repo)
    gpus = {GPU_ARCH: ",".join(gpu_archs)} if gpu_archs else {}
    return ImageKey(
        repo=git_repo.origin_url() or str(Path(repo).resolve()),
        inputs_tree=inputs_tree(git_repo, sha, recipe.inputs),
        recipe=recipe_hash(build_cmd, recipe),
        base_env={**base_environment(), **gpus},
    )


def inputs_tree(repo: GitRepo, sha: str, inputs: tuple[str, ...]) -> str:
    """The tree (or blob) hash of each input at sha, combined; the commit's whole tree when there are none.
    An input absent at sha counts as absent (its own 'missing' mark), not as an error."""
    if not inputs:
        tree = repo.tree_hash(sha)
        if tree is None:
            raise RepoError(f"no commit {sha[:12]} in {repo.root}")
        return tree
    hashes = [repo.tree_hash(sha, path) or "missing" for path in sorted(inputs)]
    listing = "\n".join(f"{path} {tree}" for path, tree in zip(sorted(inputs), hashes, strict=True))
    return hashlib.sha256(listing.encode()).hexdigest()


@functools.cache
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
