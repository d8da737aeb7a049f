"""A submitted request -> the spec of a bisect on the server's mirror, by the server's rules.

The request (JSON object): `repo` (as allowed), `good`, `bad` (revisions or dates, vocab/revdates.py),
optionally `link` (a URL), `recipe` (a name), `priority`, and the
settings of TUNING_KEYS (how verdicts are read and searched; `cherry_pick`: revisions of the mirror). The command
comes from the named recipe (the server's config first, then `[recipes.NAME]` of the repository's bisect.toml at the
bad commit), or, with no name, from the top-level keys of that bisect.toml; `run`, `build`, `env` and `patch` (a list
of patch texts, applied after the cherry-picks) in the request itself only where the server allows commands
(CommandNotAllowedError otherwise: HTTP 403).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bisector.core.options import BY_CONFIG_KEY, OPTIONS, Group
from bisector.core.spec import BisectSpec
from bisector.runner.config import CONFIG_FILE_NAME, build_spec, option_named_by
from bisector.service.config import COMMAND_KEYS, RECIPE_KEYS, ServiceConfig, check_recipe
from bisector.vocab.errors import InputError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.patches import Patch, PatchKind
from bisector.vocab.revdates import resolve_dated

_TUNED_GROUPS = (Group.TEST, Group.SEARCH, Group.ANALYSIS)  # how a commit is tested and judged, not where
TUNING_KEYS = frozenset(
    {o.config_key for o in OPTIONS if o.config_key is not None and o.group in _TUNED_GROUPS} - COMMAND_KEYS
) | {"gpus_per_step", "image", "image_inputs", "images_max_size"}
REQUEST_KEYS = frozenset({"repo", "good", "bad", "link", "recipe", "priority"}) | TUNING_KEYS | COMMAND_KEYS
MAX_PRIORITY = 100


class CommandNotAllowedError(InputError):
    """A free-form command in a request to a server started without --allow-commands."""


@dataclass(frozen=True)
class Submission:
    source: str  # the repository as allowed
    spec: BisectSpec  # on the mirror
    priority: int


def json_object(body: object) -> dict[str, Any]:
    """A request's body, if it is a JSON object; InputError (HTTP 400) otherwise."""
    if not isinstance(body, dict):
        raise InputError("the request must be a JSON object")
    return body


def check_request(body: object) -> dict[str, Any]:
    """The request's keys and basic types; InputError (HTTP 400) on anything else."""
    body = json_object(body)
    unknown = set(body) - REQUEST_KEYS
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(REQUEST_KEYS))})")
    for key in ("repo", "good", "bad"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise InputError(f"{key!r} is required (a string)")
    for key, value in body.items():
        if _holds_nul(value):
            raise InputError(f"{key}: a NUL character cannot be passed to git or a command")
    recipe = body.get("recipe")
    if recipe is not None and not isinstance(recipe, str):
        raise InputError("'recipe' must be a string (a recipe's name)")
    priority = body.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= MAX_PRIORITY:
        raise InputError(f"'priority' must be a whole number from 0 to {MAX_PRIORITY}")
    return body


def _holds_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    return False


def check_commands(config: ServiceConfig, body: dict[str, Any]) -> None:
    given = sorted(key for key in COMMAND_KEYS if body.get(key))
    if given and not config.allow_commands:
        raise CommandNotAllowedError(
            f"{', '.join(given)}: free-form commands are refused by this server (started without --allow-commands); "
            "name a recipe instead"
        )


def build_submission(config: ServiceConfig, mirror: Path, source: str, body: dict[str, Any]) -> Submission:
    """The spec a request asks for (body checked by check_request, the mirror fetched)."""
    check_commands(config, body)
    repo = GitRepo(mirror)
    bad = repo.resolve(str(resolve_dated(repo.root, {"bad": body["bad"]})["bad"]))
    recipe = _recipe(config, repo, bad, body.get("recipe"))
    flags: dict[str, Any] = {**recipe}
    flags.update({key: value for key, value in body.items() if key in TUNING_KEYS | COMMAND_KEYS})
    flags.update(
        good=body["good"], bad=body["bad"], link=body.get("link"), executor=config.executor, workers=config.slots
    )
    flags["ray_address"] = config.ray_address
    if "patch" in flags:  # the request's texts: no file of the server's is read
        flags["patches"] = _request_patches(flags.pop("patch"))
    if not flags.get("run"):
        raise InputError("no command: name a recipe (or give the repository a bisect.toml with `run`)")
    try:
        spec = build_spec(repo.root, _by_option(flags))
    except InputError as exc:
        raise InputError(_by_request_key(str(exc))) from None
    return Submission(source=source, spec=spec, priority=int(body.get("priority", 0)))


def _request_patches(texts: object) -> list[dict[str, str]]:
    if not (isinstance(texts, list) and all(isinstance(text, str) for text in texts)):
        raise InputError("patch: expected a list of patch texts (strings)")
    return [Patch(PatchKind.DIFF, f"#{number} of the request", text).to_json() for number, text in enumerate(texts, 1)]


def _by_request_key(message: str) -> str:
    """A spec's error as the API names the field: by its request key (`timeout`, not `--timeout` or `timeout_s`)."""
    option = option_named_by(message)
    if option is None or option.config_key is None:
        return message
    for prefix in (f"{option.name}:", option.cli_flag):
        if prefix and message.startswith(prefix):
            return f"{option.config_key}: {message.removeprefix(prefix).strip()}"
    return message


def _by_option(settings: dict[str, Any]) -> dict[str, Any]:
    """Requests and recipes use bisect.toml's keys (timeout, not timeout_s): the values by option name."""
    return {BY_CONFIG_KEY[key].name if key in BY_CONFIG_KEY else key: value for key, value in settings.items()}


def _recipe(config: ServiceConfig, repo: GitRepo, bad: str, name: str | None) -> dict[str, Any]:
    if name is not None and name in config.recipes:
        return dict(config.recipes[name])
    text = repo.show_file(bad, CONFIG_FILE_NAME)
    data = _parse_toml(text, bad) if text is not None else {}
    recipes = data.pop("recipes", {})
    if name is None:
        table = data.get("bisect", data)
        return check_recipe(
            f"{CONFIG_FILE_NAME} at {bad[:12]}",
            {k.replace("-", "_"): v for k, v in table.items() if k.replace("-", "_") in RECIPE_KEYS},
        )
    if not isinstance(recipes, dict) or name not in recipes:
        known = sorted(set(config.recipes) | set(recipes if isinstance(recipes, dict) else {}))
        raise InputError(f"unknown recipe {name!r} (known: {', '.join(known) or 'none'})")
    return check_recipe(f"recipe {name!r} of {CONFIG_FILE_NAME} at {bad[:12]}", recipes[name])


def _parse_toml(text: str, sha: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{CONFIG_FILE_NAME} at {sha[:12]}: {exc}") from None
