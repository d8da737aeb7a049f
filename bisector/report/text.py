"""The terminal report (rich), answer first: the verdict, the culprit and its metric on both sides, the
explanation; then the evidence (steps, failures), the commits of the range, and how to reproduce."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from bisector.report.model import BisectReport, given_lines, one_line, pr_suffix, unsearched_merge_advice
from bisector.report.pruning import pruned_why, pruning_lines
from bisector.report.resume import LOCAL, Commands
from bisector.vocab.domain import (
    NEVER_SENT,
    BisectStatus,
    Commit,
    ErrorKind,
    StepPurpose,
    StepRecord,
    Verdict,
    image_origin,
)

REPORT_WIDTH = 130  # columns of a report printed where no terminal says its width

VERDICT_STYLE = {
    Verdict.GOOD: "green",
    Verdict.BAD: "red",
    Verdict.SKIP: "yellow",
    Verdict.ERROR: "magenta",
    Verdict.CANCELLED: "dim",
}


def fmt_metric(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if 1e-3 <= abs(value) < 1e5 else f"{value:.4g}"


def fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def fmt_date(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M UTC")


def answer_lines(report: BisectReport) -> list[str]:
    """The answer in plain lines (shared by the text report and `bisect status` of a finished bisect)."""
    record = report.record
    old, new = report.terms
    first_bad, last_good = report.commit(record.first_bad), report.commit(record.last_good)
    shown = record.status not in (BisectStatus.FOUND, BisectStatus.AMBIGUOUS)  # those say it below
    lines = [record.message] if record.message and shown else []
    if first_bad is not None:
        lines += [
            f"{report.first_bad_words()}: {first_bad.sha}",
            f"  {first_bad.subject}{pr_suffix(first_bad)}",
            f"  {first_bad.author}, {fmt_date(first_bad.date)}",
        ]
    if last_good is not None:
        lines += [f"last {old} commit: {last_good.sha}", f"  {last_good.subject}{pr_suffix(last_good)}"]
    if first_bad is not None and last_good is not None:
        before, after = fmt_metric(report.metric(last_good.sha)), fmt_metric(report.metric(first_bad.sha))
        if (before, after) != ("-", "-"):
            lines.append(f"metric: {before} at the last {old} commit, {after} at the {report.first_bad_words()}")
    if record.status is BisectStatus.AMBIGUOUS:
        lines.append(f"the first {new} commit is one of:")
        lines += [f"  {c.sha[:12]} {c.subject}" for c in report.suspects()]
    return lines


def unsearched_merge_lines(report: BisectReport, commands: Commands) -> list[str]:
    """The line saying what a merge named as the culprit brought that was not searched, and how to search it."""
    advice = unsearched_merge_advice(report, commands)
    return [] if advice is None else [f"{advice[0].words}; to search them: {advice[1]}"]


def print_text(console: Console, report: BisectReport, commands: Commands = LOCAL) -> None:
    """commands: how the reader runs the commands the report advises."""
    record = report.record
    resume = commands.resume(record)
    lines = [
        *answer_lines(report),
        *unsearched_merge_lines(report, commands),
        *([f"resume with: {resume}"] if resume else []),
        *given_lines(report.spec),
        *report.noise_lines(),
        *pruning_lines(report),
        report.rule_sentence(),
        report.work_sentence(),
    ]
    style = "green" if record.status is BisectStatus.FOUND else "yellow"
    console.print(
        Panel(
            Text("\n".join(lines)), title=f"bisect {record.id}: {record.status.value}", border_style=style, expand=False
        )
    )
    if report.explanation is not None:
        from bisector.analysis import text_renderables  # only for a bisect that has one

        console.print(Text("why: what the first bad commit changes", style="bold underline"))
        for renderable in text_renderables(report.explanation):
            console.print(renderable)
    console.print(Text("evidence", style="bold underline"))
    console.print(_steps_table(report))
    if report.failures:
        console.print(Text(f"failed steps ({len(report.failures)})", style="bold"))
        for step in report.failures:
            kind = f"{step.verdict.value if step.verdict else ''}" + (
                f"/{step.error_kind.value}" if step.error_kind else ""
            )
            console.print(
                Text(
                    f"  step {report.number(step)} at {step.sha[:12]} ({kind}): "
                    f"{one_line(step.detail) or 'no reason given'}"
                ),
                soft_wrap=True,
            )
            console.print(Text(f"    {_log_of(step)}"), soft_wrap=True)
    if report.manual_steps:
        console.print(Text(f"verdicts given by hand ({len(report.manual_steps)})", style="bold"))
        for step in report.manual_steps:
            console.print(
                Text(f"  step {report.number(step)} at {step.sha[:12]}: {one_line(step.detail)}"), soft_wrap=True
            )
    console.print(_commits_table(report))
    target = report.reproduce_target()
    console.print(
        f"reproduce {target.sha[:12]}, {target.why}, by hand:\n  {report.reproduce()}\n"
        f"or through gpu-bisect (its image, where the bisect used images):\n  {commands.rerun(record, target.sha)}",
        soft_wrap=True,
        markup=False,
    )


def _steps_table(report: BisectReport) -> Table:
    side = sum(report.side_runs.values())
    title = f"steps: {len(report.search_steps)} search" + (
        f", {len(report.manual_steps)} by hand" if report.manual_steps else ""
    )
    title += f", {side} side run(s)" if side else ""
    table = Table(title=title)
    with_images = any(step.image for step in report.steps)
    columns = ("#", "purpose", "pos", "commit", "verdict", "metric", "worker", "GPUs", "build", "run")
    for column in (*columns, "image") if with_images else columns:
        table.add_column(column, no_wrap=True)
    table.add_column("note", overflow="fold")
    for step in report.steps:
        style = VERDICT_STYLE.get(step.verdict, "") if step.verdict else "cyan"
        if step.purpose is StepPurpose.MANUAL:
            note = "by hand: see below"
        elif step.verdict in (Verdict.ERROR, Verdict.SKIP):
            note = "failed: see below"
        else:
            note = ""
        cells = [
            str(report.number(step)), step.purpose.value, report.position_label(step.sha), step.sha[:12],
            Text(report.word(step.verdict), style=style), fmt_metric(step.metric), step.worker or "-",
            ",".join(map(str, step.gpus)) or "-", fmt_s(step.build_s), fmt_s(step.run_s),
        ]  # fmt: skip
        if with_images:
            cells.append(image_cell(step.image))
        table.add_row(*cells, Text(note))
    return table


def image_cell(image: dict[str, object] | None) -> str:
    """Which image a step ran on and where it came from: `3f2a91c0e1 built 41.2s`, `3f2a91c0e1 cache`,
    `3f2a91c0e1 build failed 3.1s`."""
    if not image:
        return "-"
    built_here = image.get("source") == "built" and not image.get("reused")
    build_s = image.get("build_s")
    took = f" {fmt_s(float(build_s))}" if built_here and isinstance(build_s, int | float) else ""
    return f"{str(image.get('id', ''))[:10]} {image_origin(image)}{took}"


def range_rows(report: BisectReport) -> list[Commit | int]:
    """The commits a report's range table shows (CommitRange.shown: all of a short range; of a longer one the ends,
    the tested commits and the first bad one's neighbours), an int (how many commits are left out) in each gap."""
    candidates, first_bad = report.candidates, report.commit(report.record.first_bad)
    tested = {report.position(s.sha) for s in report.steps}
    out: list[Commit | int] = []
    previous = -1
    for position in candidates.shown(tested, first_bad.position if first_bad else None):
        if position != previous + 1:
            out.append(position - previous - 1)
        previous = position
        out.append(candidates[position])
    return out


def untested(count: int) -> str:
    """The row standing for `count` commits the commits table leaves out."""
    return f"{count} untested commit" + ("" if count == 1 else "s")


def first_bad_mark(report: BisectReport, commit: Commit) -> str:
    """The arrow beside the first bad commit in the range table ("first known" when it is not the answer)."""
    if commit.sha != report.record.first_bad:
        return ""
    known = "" if report.record.status is BisectStatus.FOUND else "known "
    return f"<- first {known}{report.terms[1]}"


def _commits_table(report: BisectReport) -> Table:
    table = Table(title="commits in range (oldest first)")
    for column in ("pos", "commit", "verdict"):
        table.add_column(column, no_wrap=True)
    table.add_column("subject", overflow="fold")
    for commit in range_rows(report):
        if isinstance(commit, int):
            table.add_row("...", "", "", Text(untested(commit), style="dim"))
            continue
        state = report.state_of(commit.sha)
        mark = f"  {first_bad_mark(report, commit)}" if commit.sha == report.record.first_bad else ""
        pruned = pruned_why(report, commit.sha)
        table.add_row(
            str(commit.position), commit.sha[:12],
            Text(report.word(state), style=VERDICT_STYLE[state]) if state else Text("pruned" if pruned else "", "dim"),
            Text(commit.subject + mark),
        )  # fmt: skip
    return table


def _log_of(step: StepRecord) -> str:
    """The step's log line: its path named with the store's step id (the `step-<id>-...` in the log's name, which the
    report's step numbers are not)."""
    if not step.log_path:
        return f"log: {_no_log(step)}"
    if not Path(step.log_path).exists():  # a step given up on, on another node (its log ships with its result)
        return f"log (step id {step.id}): {step.log_path} (not on this host)"
    return f"log (step id {step.id}): {step.log_path}"


def _no_log(step: StepRecord) -> str:
    if step.error_kind is ErrorKind.INTERRUPTED and not step.detail.startswith(NEVER_SENT):
        return "none stored (its coordinator stopped before the step reported)"  # `resume` or a stop signal
    return "none (the step never started its command)"
