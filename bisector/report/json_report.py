"""The report as JSON for tools. Every key is documented in docs/report-schema.md (a test checks real reports
against it); SCHEMA_VERSION changes when a key is removed or changes its meaning."""

from __future__ import annotations

import json

from bisector.report.model import BisectReport, one_line, unsearched_merge_advice
from bisector.report.resume import LOCAL, Commands, resume_json
from bisector.vocab.domain import BisectStatus, Commit, StepRecord

SCHEMA_VERSION = 2  # 2: commit dates are author dates (1: committer dates); reports without the key are older


def report_json(report: BisectReport, commands: Commands = LOCAL) -> dict[str, object]:
    """commands: how the reader runs the command the report advises (`rerun`)."""
    record = report.record
    first_bad, last_good = report.commit(record.first_bad), report.commit(record.last_good)
    old, new = report.terms
    target = report.reproduce_target()
    return {
        "schema_version": SCHEMA_VERSION,
        "id": record.id,
        "status": record.status.value,
        "message": record.message,
        "resume": resume_json(record),
        "terms": {"old": old, "new": new},
        "repo": record.repo,
        "good": record.good,
        "bad": record.bad,
        "paths": list(report.spec.test.paths),
        "dates": report.spec.dates,
        "link": report.spec.link,
        "patches": [patch.to_json() for patch in report.spec.test.patches],
        "created": record.created.isoformat(),
        "finished": record.finished.isoformat() if record.finished else None,
        "first_bad": _commit_json(first_bad, report.metric(record.first_bad)) if first_bad else None,
        "last_good": _commit_json(last_good, report.metric(record.last_good)) if last_good else None,
        "unsearched_merge": _unsearched_merge_json(report, commands),
        "suspects": [c.sha for c in report.suspects()] if record.status is BisectStatus.AMBIGUOUS else [],
        "candidates": len(report.candidates),
        "search_steps": len(report.search_steps),
        "manual_steps": len(report.manual_steps),
        "side_runs": {purpose.value: count for purpose, count in sorted(report.side_runs.items())},
        "steps": steps_json(report),
        "gpu_seconds": round(report.gpu_seconds, 3),
        "slot_seconds": round(report.slot_seconds, 3),
        "wall_s": round(report.wall_s, 3) if report.wall_s is not None else None,
        "spec": report.spec.to_json(),
        "reproduce": report.reproduce(),
        "reproduce_target": {"sha": target.sha, "why": target.why},
        "rerun": commands.rerun(record, target.sha),
        "explanation": _explanation_json(report),
        "confirmation": record.extra.get("confirmation"),
        "decisions": record.extra.get("decisions", {}),
        "flake_seen": bool(record.extra.get("flake_seen", False)),
        "quarantined": record.extra.get("quarantined", {}),
        "endpoints": {name: check.value for name, check in report.records.endpoints.items()},
        "built_ahead": list(report.records.built_ahead),
        "pruning": report.records.pruning.to_json() if report.records.pruning else None,
    }


def render_json(report: BisectReport, commands: Commands = LOCAL) -> str:
    return json.dumps(report_json(report, commands), indent=2)


def steps_json(report: BisectReport) -> list[dict[str, object]]:
    """The report's "steps" alone: what a page polling a running bisect needs (no git runs for it)."""
    return [_step_json(report, step) for step in report.steps]


def _step_json(report: BisectReport, step: StepRecord) -> dict[str, object]:
    return {
        "number": report.number(step),
        "id": step.id,
        "sha": step.sha,
        "position": report.position(step.sha),
        "attempt": step.attempt,
        "purpose": step.purpose.value,
        "started": step.started.isoformat(),
        "finished": step.finished.isoformat() if step.finished else None,
        "verdict": step.verdict.value if step.verdict else "running",
        "term": report.word(step.verdict),
        "metric": step.metric,
        "samples": list(step.samples),
        "worker": step.worker,
        "node": step.node,
        "gpus": list(step.gpus),
        "build_s": step.build_s,
        "run_s": step.run_s,
        "exit_code": step.exit_code,
        "error_kind": step.error_kind.value if step.error_kind else None,
        "reason": one_line(step.detail),
        "detail": step.detail,
        "log_path": step.log_path,
        "image": step.image,  # {id, source, reused, build_s} of the worker image it ran on; None: no image
    }


def _unsearched_merge_json(report: BisectReport, commands: Commands) -> dict[str, object] | None:
    advice = unsearched_merge_advice(report, commands)
    return None if advice is None else {"commits": advice[0].commits, "command": advice[1]}


def _commit_json(commit: Commit, metric: float | None) -> dict[str, object]:
    return {
        "sha": commit.sha,
        "position": commit.position,
        "subject": commit.subject,
        "author": commit.author,
        "date": commit.date.isoformat() if commit.date else None,
        "pr": commit.pr,
        "metric": metric,
    }


def _explanation_json(report: BisectReport) -> dict[str, object] | None:
    if report.explanation is None:
        return None
    from bisector.analysis import explanation_json  # imported only for a bisect that has an explanation

    return explanation_json(report.explanation)
