"""The click options of the bisect options (bisector/core/options.py), and their parsed values as option values.

A command takes the options it names: `@spec_options("workers", "executor", help={...})`; each becomes a click
parameter named as the option, with no default (None: not given, so bisect.toml or the stored spec decides).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from bisector.cli.support import CLIError
from bisector.core.options import BY_NAME, EXECUTOR_OPTION_NAMES, OPTIONS, Form, Option

F = TypeVar("F", bound=Callable[..., Any])
START_OPTIONS = tuple(option.name for option in OPTIONS if option.cli_flag is not None)
_CLICK_TYPES: dict[tuple[type, ...], click.ParamType[Any]] = {(int,): click.INT, (int, float): click.FLOAT}
# Given twice, refused rather than the last one taken: `git bisect good A B` takes several good commits, a bisect one.
_ONCE = {"good": "the newest good one you know", "bad": "the oldest bad one you know"}


def spec_options(
    *names: str,
    help: Mapping[str, str] | None = None,  # as click's own keyword
    choices: Mapping[str, Sequence[str]] | None = None,
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> Callable[[F], F]:
    """Decorate a command with these options, in this order; help, choices and aliases (more flags) per name
    adapt an option to the command."""

    def decorate(function: F) -> F:
        for name in reversed(names):
            option = BY_NAME[name]
            function = _click_option(
                option,
                (help or {}).get(name, option.help),
                (choices or {}).get(name),
                tuple((aliases or {}).get(name, ())),
            )(function)
        return function

    return decorate


def _click_option(option: Option, help_text: str, choices: Sequence[str] | None, aliases: tuple[str, ...]) -> Any:
    flag = option.cli_flag
    assert flag is not None, f"{option.name} has no flag"
    declared = (flag, *aliases, option.name)
    kwargs: dict[str, Any] = {"help": help_text, "default": None}
    if option.form is Form.FLAG:
        kwargs["is_flag"] = True
    elif option.form is Form.SWITCH:
        declared = (f"{flag}/--no-{flag[2:]}", option.name)
    elif option.form in (Form.REPEATED, Form.PAIRS) or option.name in _ONCE:
        kwargs |= {"multiple": True, "default": ()}
    if option.choices is not None:
        kwargs["type"] = click.Choice(list(choices or [choice.value for choice in option.choices]))
    elif option.form is Form.VALUE and option.types in _CLICK_TYPES:
        kwargs["type"] = _CLICK_TYPES[option.types]
    if option.metavar is not None:
        kwargs["metavar"] = option.metavar
    if option.envvar is not None:
        kwargs["envvar"] = option.envvar
    return click.option(*declared, **kwargs)


def option_values(params: Mapping[str, Any]) -> dict[str, object]:
    """The option values that were given among a command's parsed params (others, like --db, are left out)."""
    values: dict[str, object] = {}
    for name, value in params.items():
        option = BY_NAME.get(name)
        if option is None or value is None or value == ():
            continue
        if option.name in _ONCE:
            if len(value) > 1:
                given = ", ".join(value)
                raise CLIError(f"{option.cli_flag} given {len(value)} times ({given}): give one, {_ONCE[name]}")
            values[name] = value[0]
        elif option.form is Form.PAIRS:
            values[name] = env_pairs(value) if name == "env" else resource_pairs(value)
        elif option.form is Form.REPEATED:
            values[name] = list(value)
        else:
            values[name] = value
    return values


def executor_overrides(params: Mapping[str, Any]) -> dict[str, object]:
    """The executor settings `bisect resume` / `run-at --bisect` were given, as option values."""
    return {name: value for name, value in option_values(params).items() if name in EXECUTOR_OPTION_NAMES}


def env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    from bisector.core.spec import ENV_NAME

    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_NAME.fullmatch(key):
            raise CLIError(f"--env {pair!r}: write KEY=VALUE, KEY of letters, digits and _")
        env[key] = value
    return env


def resource_pairs(pairs: Sequence[str]) -> dict[str, float]:
    resources = {}
    for pair in pairs:
        name, sep, amount = pair.partition("=")
        try:
            resources[name] = float(amount)
        except ValueError:
            raise CLIError(f"--resources {pair!r}: write NAME=AMOUNT, e.g. H200=1") from None
        if not sep or not name or resources[name] <= 0:
            raise CLIError(f"--resources {pair!r}: write NAME=AMOUNT with a positive amount, e.g. H200=1")
    return resources
