"""bisect.toml and flags merged into a BisectSpec: flags that were given win over the file's keys.

The file's keys are the options' (bisector/options.py), with - or _; `[bisect]` may hold them.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bisector.options import BY_CONFIG_KEY, describe, has_type, type_names
from bisector.spec import BisectSpec
from vocab.errors import InputError

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
        if not has_type(value, option.types):
            raise InputError(f"{path}: {key} must be {type_names(option.types)}, not {describe(value)}")
        config[option.name] = value
    return config


def build_spec(repo_root: Path, flags: Mapping[str, object]) -> BisectSpec:
    """Merge bisect.toml and flags (by option name; None or empty: not given) into a validated spec."""
    merged: dict[str, Any] = dict(load_config_file(repo_root))
    for name, value in flags.items():
        if value is None or (isinstance(value, list | tuple | dict) and not value):
            continue
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
    return BisectSpec.from_options(merged)
