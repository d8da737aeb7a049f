"""`bisect status ID`: a few lines on where a bisect stands. `bisect report ID` is the whole report."""

from __future__ import annotations

from datetime import UTC, datetime

from bisector.report.model import BisectReport, one_line
from bisector.report.resume import LOCAL, Commands
from bisector.report.text import fmt_metric, fmt_s, unsearched_merge_lines
from bisector.vocab.domain import BisectRecord, BisectStatus, StepPurpose

LAST_STEPS = 5


def owner_line(record: BisectRecord, commands: Commands = LOCAL) -> str | None:
    """Who runs the bisect (the coordinator holding its lease, and how fresh that is), while one may; and a found
    culprit whose explanation a stopped coordinator left for a resume. commands: how the reader resumes it."""
    from bisector.runner.ownership import describe_owner, holders_ttl_s

    now = datetime.now(UTC)
    ttl_s = holders_ttl_s(record.lease_ttl_s)
    resume = f"`{command}`" if (command := commands.resume(record)) else None
    if record.status is BisectStatus.FOUND and record.extra.get("analysis") == "pending":
        if record.owner is None:
            return "coordinator: none; the explanation was cut short" + (f": {resume} finishes it" if resume else "")
        return f"coordinator: {describe_owner(record.owner, record.heartbeat, now, ttl_s)} (explaining the culprit)"
    if record.status.is_terminal():
        return None
    if record.owner is None:
        return "coordinator: none is running it; " + (f"{resume} continues" if resume else "its server runs it again")
    return f"coordinator: {describe_owner(record.owner, record.heartbeat, now, ttl_s)}"


def status_lines(report: BisectReport, queued_behind: int | None = None, commands: Commands = LOCAL) -> list[str]:
    """queued_behind: a bisect a server queued and no coordinator took yet, behind this many queued jobs
    (db.jobs.JobQueue.waiting): it is shown queued, owned by that server. commands: how the reader runs the
    commands the lines advise."""
    record = report.record
    old, new = report.terms
    lines = [f"bisect {record.id}: {'queued' if queued_behind is not None else record.status.value}"]
    where = f" touching {' '.join(report.spec.test.paths)}" if report.spec.test.paths else ""
    lines.append(
        f"range: {record.good[:12]} ({old}) .. {record.bad[:12]} ({new}), {len(report.candidates)} commits{where}, "
        f"in {record.repo}"
    )
    if queued_behind is not None:
        lines.append(f"queue: waiting for a slot of the server that stored it, behind {queued_behind} queued job(s)")
    elif (owner := owner_line(record, commands)) is not None:
        lines.append(owner)
    running = sum(1 for s in report.steps if s.verdict is None)
    done = sum(1 for s in report.search_steps if s.verdict is not None)
    progress = f"progress: {done} search step(s) done, {running} running"
    if report.manual_steps:
        progress += f", {len(report.manual_steps)} verdict(s) given by hand"
    last_old, first_new = report.boundary()
    if record.status.is_terminal():
        first_bad = report.commit(record.first_bad)
        answer = record.message or (
            f"first {new} commit: {first_bad.sha[:12]} {first_bad.subject}" if first_bad else ""
        )
        lines += [progress, f"answer: {answer}" if answer else "answer: none"]
        lines += unsearched_merge_lines(report, commands)
    else:
        # An endpoint without its verdict yet (lazy checks test one only when the answer rests on it) is assumed.
        low = last_old or report.candidates[0]
        high = first_new or report.candidates[-1]
        proviso = "" if last_old is not None and first_new is not None else ", if the endpoints hold"
        lines.append(
            f"{progress}; the first {new} commit is one of {high.position - low.position} after {low.sha[:12]} up to "
            f"{high.sha[:12]}{proviso}"
        )
    if record.message and not record.status.is_terminal():
        lines.append(f"note: {record.message}")
    if report.steps:
        lines.append("last steps:")
        for step in report.steps[-LAST_STEPS:]:
            metric = f" metric {fmt_metric(step.metric)}" if step.metric is not None else ""
            where_run = f" on {step.worker}" if step.worker else ""
            undecided = not (step.verdict and step.verdict.decides) or step.purpose is StepPurpose.MANUAL
            reason = f": {one_line(step.detail)}" if step.detail and undecided else ""
            lines.append(
                f"  {report.number(step)}. {step.purpose.value} {step.sha[:12]} {report.word(step.verdict)}{metric}"
                f"{where_run} {fmt_s(step.run_s)}{reason}"
            )
    lines.append(commands.report_hint(record.id))
    return lines
