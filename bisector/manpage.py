"""The man page bisect(1), generated from the click commands (`bisect man`; docs/bisect.1 is its output).

Every command and group is a section with its usage, help text and options, so the page cannot fall behind
the commands (tests/test_habits_cli.py checks docs/bisect.1 against a fresh rendering).
"""

from __future__ import annotations

import inspect
from datetime import date

import click

PROGRAM = "bisect"


def _escape(text: str) -> str:
    """roff: backslashes doubled, a leading . or ' kept from being read as a request, - as a hyphen."""
    lines = []
    for line in text.replace("\\", "\\e").replace("-", "\\-").splitlines():
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def iter_commands(group: click.Group, prefix: str = PROGRAM) -> list[tuple[str, click.Command]]:
    """Every command under group, groups included, depth first, as (full name, command)."""
    out: list[tuple[str, click.Command]] = []
    for name in sorted(group.commands):
        command = group.commands[name]
        full = f"{prefix} {name}"
        out.append((full, command))
        if isinstance(command, click.Group):
            out += iter_commands(command, full)
    return out


def render_man(group: click.Group, version: str, today: date | None = None) -> str:
    day = (today or date.today()).isoformat()
    context = group.make_context(PROGRAM, [], resilient_parsing=True)  # with the group's context_settings (-h)
    out = [
        f'.TH BISECT 1 "{day}" "gpu-bisect {_escape(version)}" "User Commands"',
        ".SH NAME",
        f"{PROGRAM} \\- {_escape(group.help or '')}",
        ".SH SYNOPSIS",
        f".B {PROGRAM}",
        "\\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        _escape(
            "Each command below is also documented by `bisect COMMAND --help`. Exit status: 0 a first bad "
            "commit was found; 2 bad input (one line on stderr); 3 the bisect ended without naming one commit."
        ),
        ".SH COMMANDS",
    ]
    for full_name, command in iter_commands(group):
        sub_context = click.Context(command, info_name=full_name, parent=context)
        pieces = command.collect_usage_pieces(sub_context)
        out += [".SS " + _escape(full_name), ".B " + _escape(f"{full_name} {' '.join(pieces)}".strip()), ".PP"]
        paragraphs = inspect.cleandoc(command.help or command.short_help or "").split("\n\n")
        out.append("\n.PP\n".join(_escape(" ".join(p.split())) for p in paragraphs))
        for param in command.get_params(sub_context):
            record = param.get_help_record(sub_context) if isinstance(param, click.Option) else None
            if record is None:
                continue
            names, help_text = record
            out += [".TP", "\\fB" + _escape(names) + "\\fR", _escape(help_text or "")]
    out += [
        ".SH ENVIRONMENT",
        ".TP",
        "\\fBBISECT_DB\\fR",
        _escape("The result store: a SQLAlchemy URL or a SQLite file path (as --db)."),
        ".TP",
        "\\fBBISECT_DATA_DIR\\fR, \\fBBISECT_CACHE_DIR\\fR",
        _escape("Where the store and logs, and the worker worktrees, live."),
        ".SH SEE ALSO",
        "git-bisect(1)",
    ]
    return "\n".join(out) + "\n"
