"""How a step's image is described, as options give it: the recipe of a venv image (mode, inputs, size cap,
prebuilt artifact), sizes, and a container image's reference template. Checked where a spec is made; made and
found by workers/images and workers/container*.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bisector.vocab.errors import InputError
from bisector.vocab.patches import Patch

IMAGE_MODES = ("none", "venv")  # none: build in the slot's worktree every step (no image)
DEFAULT_MAX_BYTES = 20 << 30
_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class ImageRecipe:
    """How a step's image is made: the build command, the paths whose tree decides the key (empty: the whole
    tree), the cache root's size cap, the patches applied to the commit's tree before its build, and the spec's
    environment variables, which its build sees."""

    mode: str = "venv"
    inputs: tuple[str, ...] = ()
    max_bytes: int = DEFAULT_MAX_BYTES
    artifact: str | None = None  # where a commit's prebuilt wheels are ({sha}, {short}): installed instead of a build
    patches: tuple[Patch, ...] = ()  # --cherry-pick, --patch: applied to the tree the image holds
    env: tuple[tuple[str, str], ...] = ()  # the spec's --env, sorted (name, value) pairs

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


def container_reference(template: str | None, sha: str) -> str | None:
    """The commit's image reference: the template with {sha} (and {short}, 12 characters) filled."""
    if template is None:
        return None
    try:
        return template.format(sha=sha, short=sha[:12])
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(f"--image-template {template!r}: only {{sha}} and {{short}} can be filled ({exc})") from None


def check_container_template(template: str, image: str, artifact: str | None) -> None:
    """Refuse an --image-template that cannot work with the other executor settings."""
    reference = container_reference(template, "0" * 40) or ""
    if not reference or any(c.isspace() for c in reference):
        raise InputError(f"--image-template {template!r}: an image reference has no spaces")
    if image != "none" or artifact is not None:
        raise InputError("--image-template runs steps in container images: leave out --image venv and --artifact")
