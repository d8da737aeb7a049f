"""What a server serves: its repositories, recipes, command policy, tokens and slots; from options and a file.

The config file (TOML, `--config`):

    allow_repos = ["/srv/repos/kernels", "https://example.com/kernels.git"]
    allow_commands = false            # free-form run/build/env from the API (default: only recipes)
    [recipes.gemm-latency]            # a named recipe: any of RECIPE_KEYS
    build = "make -j8"
    run = "python bench.py"
    metric = "latency_ms: ([0-9.]+)"
    expect = "< 2.5"

Recipes also come from the repository's own `bisect.toml` at the bad commit (`[recipes.NAME]` tables; its
top-level keys are the recipe used when none is named). Options add to the file (`--allow-repo` appends).
"""

from __future__ import annotations

import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisector.service.body_limit import DEFAULT_MAX_REQUEST_BYTES
from bisector.service.tokens import TokenBook
from bisector.vocab.errors import InputError

# What a recipe may set: the command and how its output is read. Free-form `run`, `build` and `env` from a
# request need --allow-commands: each is command execution (bash runs $BASH_ENV, the loader $LD_PRELOAD).
RECIPE_KEYS = frozenset(
    {"run", "build", "metric", "metric_json", "expect", "no_metric", "timeout", "env", "repeat", "max_repeat",
     "noise_band", "direction", "infra_patterns", "image", "image_inputs", "images_max_size"}
)  # fmt: skip
COMMAND_KEYS = frozenset({"run", "build", "env", "patch"})  # patch: a request's patch texts, code it brings
EXECUTOR_KINDS = ("local", "ray")
MAX_SLOTS = 256


@dataclass(frozen=True)
class ServiceConfig:
    allowed_repos: tuple[str, ...]  # local paths (resolved) and URLs, as the clients name them
    mirror_dir: Path  # the server's own clones, one per allowed repository
    tokens: TokenBook = field(default_factory=lambda: TokenBook({}))  # who may write (Authorization: Bearer)
    slots: int = 1
    executor: str = "local"
    ray_address: str | None = None
    allow_commands: bool = False
    recipes: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # a larger body is answered 413 unread
    # the key of the forms' CSRF tokens; `bisect serve` reads it from its data directory (service/secret_key.py)
    form_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def __post_init__(self) -> None:
        if not self.allowed_repos:
            raise InputError("bisect serve needs at least one --allow-repo PATH|URL (or allow_repos in --config)")
        if self.executor not in EXECUTOR_KINDS:
            raise InputError(f"--executor {self.executor!r}: one of {', '.join(EXECUTOR_KINDS)}")
        if not 1 <= self.slots <= MAX_SLOTS:
            raise InputError(f"--slots {self.slots}: between 1 and {MAX_SLOTS}")
        if self.max_request_bytes < 1:
            raise InputError(f"--max-request-bytes {self.max_request_bytes}: 1 or more")
        for name, recipe in self.recipes.items():
            check_recipe(f"recipe {name!r}", recipe)


def normalized_source(source: str) -> str:
    """How a repository is compared with the allowed ones: an existing local path by its resolved path, else the
    text as given (a URL)."""
    path = Path(source).expanduser()
    if "://" not in source and path.exists():
        return str(path.resolve())
    return source.strip()


def check_recipe(where: str, recipe: object) -> dict[str, Any]:
    if not isinstance(recipe, dict):
        raise InputError(f"{where}: must be a table")
    unknown = set(recipe) - RECIPE_KEYS
    if unknown:
        raise InputError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(RECIPE_KEYS))})"
        )
    return dict(recipe)


def read_config_file(path: str) -> dict[str, Any]:
    """The keys of a server config file: allow_repos, allow_commands, recipes."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"--config {path}: {exc}") from None
    unknown = set(data) - {"allow_repos", "allow_commands", "recipes"}
    if unknown:
        raise InputError(f"--config {path}: unknown key(s) {', '.join(sorted(unknown))}")
    repos = data.get("allow_repos", [])
    if not isinstance(repos, list) or not all(isinstance(r, str) for r in repos):
        raise InputError(f"--config {path}: allow_repos must be a list of paths and URLs")
    if not isinstance(data.get("allow_commands", False), bool):
        raise InputError(f"--config {path}: allow_commands must be true or false")
    recipes = data.get("recipes", {})
    if not isinstance(recipes, dict):
        raise InputError(f"--config {path}: [recipes] must hold tables")
    return {"allow_repos": repos, "allow_commands": data.get("allow_commands", False), "recipes": recipes}
