"""`bisect triage`: sort a CI run's failures against a good run's, list the suspects, bisect the regressions.

Exit codes: 0 no regression; 1 at least one regression (CI can gate on it); 2 bad input (one line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from bisector.cli.options import option_values, spec_options
from bisector.cli.support import (
    CLIError,
    db_option,
    err_console,
    observer,
    output_format_option,
    stoppable_by_signals,
    translated_errors,
)

EXIT_REGRESSIONS = 1


@click.command()
@click.argument("good_results", type=click.Path(path_type=Path))
@click.argument("bad_results", type=click.Path(path_type=Path))
@click.option("--good", "good_rev", help="The good run's commit (default: the one its results record).")
@click.option("--bad", "bad_rev", help="The bad run's commit (default: the one its results record).")
@click.option("--repo", type=click.Path(file_okay=False), default=".", show_default=True, help="The git repository.")
@output_format_option(("markdown", "json"), "Markdown to paste into a PR or an issue, or JSON.")
@click.option(
    "--signatures",
    "signatures_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML or YAML list of {name, pattern, class} failure signatures, tried before the built-in ones.",
)
@click.option(
    "--noise-band",
    default="1%",
    show_default=True,
    help="A metric (or a failing test's `51.4 > 51.0`) this close past its threshold is flaky: absolute (0.5) or "
    "relative to the threshold (1%).",
)
@click.option("--submit", is_flag=True, help="Start one bisect per regression (grouped by test) and run them.")
@click.option(
    "--run-template",
    default="python -m pytest -q {test}",
    show_default=True,
    help="With --submit: the command that tests a regressed test; {test} {file} {name} {classname}.",
)
@click.option("--metric-run-template", help="With --submit: the command that measures a metric ({metric}).")
@spec_options(
    "build", "workers", "executor", "timeout_s", "explain",
    help={
        "build": "With --submit: shell command run before each test.",
        "workers": "With --submit: steps run at once per bisect.",
        "executor": "With --submit: where steps run.",
        "timeout_s": "With --submit: seconds a step may take.",
        "explain": "With --submit: explain each culprit found.  [default: on]",
    },
)  # fmt: skip
@click.option("--notify", "notify_url", help="With --submit: POST each finished bisect's report to this webhook.")
@db_option
def triage(
    good_results: Path,
    bad_results: Path,
    repo: str,
    output_format: str,
    signatures_file: Path | None,
    noise_band: str,
    submit: bool,
    notify_url: str | None,
    db_url: str | None,
    **submit_flags: Any,
) -> None:
    """Sort a CI run's failures into infrastructure, flaky or regression and list the suspect commits.

    GOOD_RESULTS and BAD_RESULTS are JUnit XML files, metrics JSON files ({"commit": SHA, "metrics": {NAME:
    {"value": V, "threshold": T, "direction": "lower"|"higher"}}}) or directories of both. Exit 0: no
    regression; 1: regressions found; 2: bad input.
    """
    from bisector.runner.notify import check_webhook_url
    from bisector.triage import render_triage_markdown, triage_json, triage_runs

    with translated_errors():
        if notify_url is not None:
            if not submit:
                raise CLIError("--notify needs --submit (it posts the reports of the bisects it starts)")
            check_webhook_url(notify_url)
        report = triage_runs(
            good_results,
            bad_results,
            repo=repo,
            good_rev=submit_flags.pop("good_rev"),
            bad_rev=submit_flags.pop("bad_rev"),
            signatures_file=signatures_file,
            noise_band=noise_band,
        )
        bisects: list[dict[str, Any]] = []
        if output_format == "markdown":
            click.echo(render_triage_markdown(report))
        if submit:
            with stoppable_by_signals():  # a stop stores the running steps as interrupted: `bisect resume ID`
                bisects = _submit(report, submit_flags, db_url, notify_url, echo=output_format == "markdown")
    if output_format == "json":
        document = triage_json(report)
        if submit:
            document["bisects"] = bisects
        click.echo(json.dumps(document, indent=2))
    if report.regressions:
        sys.exit(EXIT_REGRESSIONS)


def _submit(
    report: Any, flags: dict[str, Any], db_url: str | None, notify_url: str | None, *, echo: bool
) -> list[dict[str, Any]]:
    """Run a bisect per planned regression; print (Markdown) and return what each found."""
    from bisector.runner.wiring import open_store
    from bisector.triage.submit import plan_bisects, run_bisects

    plans, left_out = plan_bisects(report, flags.pop("run_template"), flags.pop("metric_run_template"))
    options = option_values(flags)
    rows: list[dict[str, Any]] = []
    if echo:
        click.echo(f"**Bisects** ({len(plans)} started; infrastructure and flaky failures are never bisected):\n")
        for skipped in left_out:
            click.echo(f"- `{skipped.test}`: not bisected ({skipped.why})")
    with open_store(db_url) as store:
        for started in run_bisects(report, plans, store, options, observer()):
            row = {
                "id": started.bisect_id,
                "test": started.plan.key,
                "failures": list(started.plan.failures),
                "run": started.plan.run,
                "status": started.status,
                "first_bad": started.first_bad,
            }
            if notify_url is not None:
                row["notified"] = notify_with_warning(store, started.bisect_id, notify_url)
            rows.append(row)
            if echo:
                first_bad = f", first bad `{started.first_bad[:12]}`" if started.first_bad else ""
                click.echo(
                    f"- bisect {started.bisect_id} `{started.plan.key}`: {started.status}{first_bad} "
                    f"(`bisect report {started.bisect_id}`)"
                )
    return rows


def notify_with_warning(store: Any, bisect_id: int, url: str) -> bool:
    """Post a finished bisect's report; a failure is one warning on stderr, never an error or a new exit code."""
    from bisector.runner.notify import notify_finished

    delivery = notify_finished(store, bisect_id, url)
    if delivery.delivered:
        err_console().print(f"bisect {bisect_id}: {delivery.summary()}")
    else:
        click.echo(f"bisect: warning: bisect {bisect_id}: {delivery.summary()}", err=True)
    return delivery.delivered
