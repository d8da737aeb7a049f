"""The man page bisect(1), generated from the click commands (`bisect man`; docs/bisect.1 is its output).

Every command and group is a section with its usage, help text and options, so the page cannot fall behind
the commands (tests/test_habits_cli.py checks docs/bisect.1 against a fresh rendering).
"""

from __future__ import annotations

import inspect
from datetime import date
from pathlib import Path

import click

from bisector.cli.support import CLIError

PROGRAM = "bisect"

# What a user may set, read where named. tests/test_habits_cli.py checks that every BISECT_* and XDG_* variable the
# code reads is here (STEP_VARIABLES: those bisect sets for the steps instead).
ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("BISECT_DB", "The result store: a SQLAlchemy URL or a SQLite file path (as --db)."),
    ("BISECT_DATA_DIR", "Where the default SQLite store and the step logs live, and bisect serve's mirrors and "
     "form key (default: $XDG_DATA_HOME/gpu-bisect, else ~/.local/share/gpu-bisect)."),
    ("BISECT_CACHE_DIR", "Where the worker worktrees, their submodules' repositories and the worker images live "
     "(default: $XDG_CACHE_HOME/gpu-bisect, else ~/.cache/gpu-bisect)."),
    ("XDG_DATA_HOME, XDG_CACHE_HOME", "The bases of the two above when those are unset (absolute paths only: a "
     "relative one is ignored)."),
    ("BISECT_GPUS", "The GPU ids this host offers to steps (\"0,1,2\"; empty: none, CPU slots); unset: "
     "$CUDA_VISIBLE_DEVICES, else what nvidia-smi lists. Each step gets its slot's GPUs as CUDA_VISIBLE_DEVICES."),
    ("BISECT_GPU_LOCK_DIR", "The host-wide directory of per-GPU lock files through which bisects on one host share "
     "its GPUs (default: /tmp/gpu-bisect-gpus)."),
    ("BISECT_BUILD_AHEAD_SLOTS", "How many images are built ahead of their steps at once on this host, over all "
     "its bisects (--build-ahead); the slots' lock files live beside the GPU locks (default: one per 16 CPUs, at "
     "least 2)."),
    ("BISECT_TOKEN", "The bearer token of bisect serve and bisect dashboard (one person, named default, an admin; "
     "unused beside --tokens-file), and the one the clients send (submit, cancel, --server), unless --token-file."),
    ("RAY_ADDRESS", "With --executor ray: the cluster to join (as --ray-address); unset: start a local one."),
    ("BISECT_LOGS_MAX_SIZE", "The cap on a store's step logs applied whenever a bisect ends: the oldest ended "
     "bisects' log folders go first (default 10G; none: no cap)."),
    ("BISECT_LOG_CAP_BYTES", "The most bytes of one step's log kept (default 64 MiB, at least 256 KiB)."),
    ("BISECT_IMAGE_ROOT", "A worker image cache root that every node mounts at this path, so that an image built on "
     "one node serves all (default: <cache dir>/images, per node)."),
    ("BISECT_CONTAINER_ENGINE", "With --image-template: the container engine (default podman)."),
    ("BISECT_CONTAINER_RUN_ARGS", "With --image-template: more arguments of the engine's run (shell words)."),
    ("BISECT_CONTAINER_BUILD_ARGS", "With --image-template: more arguments of the engine's build (shell words)."),
    ("BISECT_CONTAINER_PULL_TIMEOUT", "With --image-template: seconds a pull of an image the engine lacks may take "
     "before it is built from the commit's Containerfile (default 300; 0: never pull)."),
    ("BISECT_CONTAINER_GPUS", "With --image-template: how a container gets its GPUs: cdi (--device "
     "nvidia.com/gpu=N, the default) or env (NVIDIA_VISIBLE_DEVICES, for the NVIDIA runtime hook)."),
    ("BISECT_KERNEL_TRACE_DRAIN_S", "With --trace-kernels: every how many seconds a traced test's profiler is "
     "stopped, its kernels counted and its events dropped, bounding its memory (default 2)."),
)  # fmt: skip
STEP_VARIABLES = (  # set by bisect in each step's environment, for the build and the test to read
    "BISECT_SHA", "BISECT_STEP_ID", "BISECT_ATTEMPT", "BISECT_WORKER", "BISECT_IMAGE_ID", "BISECT_IMAGE_DIR",
    "BISECT_IMAGE_PYTHON", "BISECT_KERNEL_TRACE", "BISECT_CALL_TRACE", "BISECT_TRACE_FUNCTIONS", "BISECT_PROBE_DIR",
    "BISECT_PROBE_COVERAGE",
)  # fmt: skip
EXIT_STATUS: tuple[tuple[str, str], ...] = (
    ("0", "Success; for start, resume, replay and demo run: a first bad commit was found; for run-at: "
     "every run decided (good or bad)."),
    ("1", "bisect triage: regressions were found (0: none)."),
    ("2", "Bad input: one line on stderr; nothing stored is lost."),
    ("3", "start, resume, replay, demo run: the bisect ended without naming one commit (ambiguous because of "
     "untestable commits beside the boundary, endpoints that disagree with good/bad or cannot be tested, a "
     "boundary that did not reproduce, or cancelled); run-at: a run did not decide (skipped or failed), or bisect "
     "cancel stopped it (run-at --bisect)."),
    ("4", "Paused: the test harness kept failing (a full disk, broken worker slots), never the commits; fix it and "
     "bisect resume ID (bisect resume --server URL ID for a server's bisect)."),
    ("128+N", "Stopped by signal N (130 Ctrl-C, 143 SIGTERM): a command that runs steps killed every test, stored "
     "the running steps as interrupted and says how bisect resume ID continues; any other command (report, status, "
     "log, ...) just stopped."),
)  # fmt: skip


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
        if command.hidden:  # an old name kept for scripts: the page names the new one only
            continue
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
        _escape("Each command below is also documented by `bisect COMMAND --help`; EXIT STATUS lists its exit codes."),
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
    out.append(".SH EXIT STATUS")
    for code, meaning in EXIT_STATUS:
        out += [".TP", f"\\fB{_escape(code)}\\fR", _escape(meaning)]
    out.append(".SH ENVIRONMENT")
    for names, meaning in ENVIRONMENT:
        out += [".TP", ", ".join(f"\\fB{_escape(name)}\\fR" for name in names.split(", ")), _escape(meaning)]
    out += [
        ".PP",
        _escape("Set by bisect in each step's environment: " + ", ".join(STEP_VARIABLES[:4]) + " (the commit, the "
                "step, its attempt, the worker) and, on a worker image, BISECT_IMAGE_ID, BISECT_IMAGE_DIR and "
                "BISECT_IMAGE_PYTHON."),
        ".SH SEE ALSO",
        "git-bisect(1)",
    ]  # fmt: skip
    return "\n".join(out) + "\n"


@click.command(name="man")
@click.option("--output", type=click.Path(dir_okay=False), help="Write the page to this file instead of stdout.")
@click.pass_context
def man_command(ctx: click.Context, output: str | None) -> None:
    """Print the man page bisect(1), generated from these commands (e.g. `bisect man | man -l -`)."""
    from importlib.metadata import PackageNotFoundError, version

    root = ctx.find_root().command
    assert isinstance(root, click.Group)
    try:
        current = version("gpu-bisect")
    except PackageNotFoundError:
        current = "dev"
    page = render_man(root, current)
    if output:
        try:
            Path(output).write_text(page)
        except OSError as exc:
            raise CLIError(f"cannot write the man page to {output}: {exc.strerror}") from None
    else:
        click.echo(page, nl=False)
