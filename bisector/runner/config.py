"""bisect.toml and flags merged into a BisectSpec: flags that were given win over the file's keys.

The file's keys are the options' (bisector/core/options.py), with - or _; `[bisect]` may hold them. Its `patch`
files are named from the repository's root.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

from bisector.core.options import BY_CONFIG_KEY, BY_NAME, OPTIONS, Option, describe, has_type, type_names
from bisector.core.spec import BisectSpec
from bisector.vocab.errors import InputError
from bisector.vocab.patches import resolve_patches
from bisector.vocab.revdates import resolve_dated

CONFIG_FILE_NAME = "bisect.toml"
AUTO_REPEAT, AUTO_MAX_REPEAT = 5, 20  # --expect auto compares sample sets: it needs several samples a commit


def load_config_file(repo_root: Path) -> dict[str, object]:
    """The options set in `bisect.toml` at the repo root (empty when there is none), by option name, checked by
    type."""
    path = repo_root / CONFIG_FILE_NAME
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: {exc}") from None
    table = data.get("bisect", data)
    if not isinstance(table, dict):
        raise InputError(f"{path}: [bisect] must be a table")
    config: dict[str, object] = {}
    for key, value in table.items():
        option = BY_CONFIG_KEY.get(key.replace("-", "_"))
        if option is None:
            raise InputError(f"{path}: unknown key {key!r} (known: {', '.join(sorted(BY_CONFIG_KEY))})")
        if option.name in ("good", "bad") and isinstance(value, date):  # TOML's unquoted date or datetime
            value = value.isoformat()
        if not has_type(value, option.types):
            raise InputError(f"{path}: {key} must be {type_names(option.types)}, not {describe(value)}")
        config[option.name] = value
    return config


def build_spec(repo_root: Path, flags: Mapping[str, object]) -> BisectSpec:
    """Merge bisect.toml and flags (by option name; None or empty: not given) into a validated spec."""
    from_file = load_config_file(repo_root)
    if isinstance(named := from_file.get("patch"), list):  # the file's patch files are named from the repository's root
        from_file["patch"] = [str(repo_root / str(name)) for name in named]
    merged: dict[str, Any] = dict(from_file)
    for name, value in flags.items():
        if value is None or (isinstance(value, list | tuple | dict) and not value):
            continue
        from_file.pop(name, None)  # the flag's value (or a table merged with it) is no longer the file's alone
        if isinstance(value, dict) and isinstance(merged.get(name), dict):
            merged[name] = {**merged[name], **value}  # a table: the flags' keys win
        else:
            merged[name] = value
    for required in ("good", "bad", "run"):
        if not merged.get(required):
            raise InputError(f"--{required} is required (as a flag or in {CONFIG_FILE_NAME})")
    if merged.get("expect") == "auto" and "repeat" not in merged:
        merged.setdefault("max_repeat", AUTO_MAX_REPEAT)
        merged["repeat"] = AUTO_REPEAT
    merged["repo"] = str(repo_root)
    merged = resolve_patches(repo_root, resolve_dated(repo_root, merged))
    try:
        return BisectSpec.from_options(merged)
    except InputError as exc:
        if any(_names(str(exc), name) for name in from_file):
            raise InputError(f"{repo_root / CONFIG_FILE_NAME}: {exc}") from None
        raise


def option_named_by(message: str) -> Option | None:
    """The option an error message of the spec is about, if it names one."""
    return next((option for option in OPTIONS if _names(message, option.name)), None)


def _names(message: str, option_name: str) -> bool:
    """Whether an error message is about this option (its errors start with its flag or its name)."""
    option = BY_NAME[option_name]
    flag = option.cli_flag
    return message.startswith(f"{option_name}:") or (
        flag is not None and re.match(rf"{re.escape(flag)}(?![\w-])", message) is not None
    )
