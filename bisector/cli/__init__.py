"""`bisect`: the command line, one module per noun. Each command parses, makes one call into the library, and
translates errors (support.py) into one line and an exit code.

Exit codes: man.EXIT_STATUS lists them all (the man page's EXIT STATUS): 0 success, 1 triage found regressions,
2 bad input, 3 no single culprit, 4 paused on a failing harness, 128+N stopped by signal N.

    bisect.py        start, resume, cancel, replay, mark: a bisect's life
    views.py         status, report, show, log, list, stats: reading stored bisects
    explain.py       explain, minimize
    images.py        images ls|rm|prune, run-at (any command, or a bisect's own with --bisect; `rerun` its old name)
    housekeeping.py  step-logs ls|prune (`logs` its old name), worktrees ls|prune
    service.py       serve, submit, dashboard (and --server for status, report, cancel)
    triage.py        triage
    demo.py          demo init|run
    man.py           man (the man page, generated from these commands)
"""

from __future__ import annotations

import gc
import os
import sys

import click

from bisector.cli import bisect, demo, explain, housekeeping, images, man, service, triage, views
from bisector.cli.support import EXIT_BROKEN_PIPE


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="gpu-bisect")
def main() -> None:
    """Find the commit that caused a GPU regression, with parallel GPU workers and a stored history."""


for _command in (
    bisect.start,
    bisect.resume,
    bisect.cancel,
    bisect.replay,
    bisect.mark,
    views.status,
    views.report_command,
    views.show,
    views.log_command,
    views.list_command,
    views.stats,
    explain.explain,
    explain.minimize,
    images.images,
    images.run_at_command,
    images.rerun,
    housekeeping.step_logs,
    housekeeping.logs,
    housekeeping.worktrees,
    service.serve,
    service.submit_command(bisect.start),
    service.dashboard,
    triage.triage,
    demo.demo,
    man.man_command,
):
    main.add_command(_command)


def main_entry() -> None:
    try:
        main(prog_name="bisect")
    except BrokenPipeError:  # the reader of the output went (`bisect ... | head`); what was stored stays stored
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush fails nowhere
        sys.exit(EXIT_BROKEN_PIPE)
    finally:
        # Everything left lives until the process ends: the interpreter's last collection need not walk it.
        gc.freeze()


if __name__ == "__main__":
    main_entry()
