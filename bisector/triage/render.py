"""A triage as Markdown (to paste into a PR or an issue) and as JSON (for tools).

JSON shape: {"good", "bad" (full SHAs), "repo", "noise_band", "counts" {class: n}, "failures" [{"test", "kind"
(test | metric), "class" (infrastructure | flaky | regression), "reason", "bisectable", and for metrics
"value", "threshold", "direction"}], "suspects" [{"rank", "sha", "subject", "pr", "author", "position",
"touched", "reason"}], "sources" {"good": [...], "bad": [...]}}. Suspects are listed in rank order.
"""

from __future__ import annotations

import json

from bisector.triage.classify import Failure
from bisector.triage.model import FailureClass
from bisector.triage.triage import TriageReport

MAX_MARKDOWN_SUSPECTS = 20


def triage_json(report: TriageReport) -> dict[str, object]:
    return {
        "repo": str(report.repo),
        "good": report.good,
        "bad": report.bad,
        "noise_band": str(report.noise_band),
        "counts": {cls.value: n for cls, n in report.counts().items()},
        "failures": [_failure_json(f) for f in report.failures],
        "suspects": [
            {
                "rank": rank,
                "sha": s.commit.sha,
                "subject": s.commit.subject,
                "pr": s.commit.pr,
                "author": s.commit.author,
                "position": s.commit.position,
                "touched": list(s.touched),
                "reason": s.reason,
            }
            for rank, s in enumerate(report.suspects, start=1)
        ],
        "sources": {"good": report.good_sources, "bad": report.bad_sources},
    }


def _failure_json(failure: Failure) -> dict[str, object]:
    row: dict[str, object] = {
        "test": failure.test,
        "kind": failure.kind,
        "class": failure.failure_class.value,
        "reason": failure.reason,
        "bisectable": failure.bisectable,
    }
    if failure.metric is not None:
        row |= {
            "value": failure.metric.value,
            "threshold": failure.metric.threshold,
            "direction": failure.metric.direction.value,
        }
    return row


def render_triage_json(report: TriageReport) -> str:
    return json.dumps(triage_json(report), indent=2)


def render_triage_markdown(report: TriageReport) -> str:
    counts = report.counts()
    verdict = (
        f"**{counts[FailureClass.REGRESSION]} regression(s)**" if counts[FailureClass.REGRESSION] else "no regression"
    )
    lines = [
        f"### gpu-bisect triage: {verdict} between `{report.good[:12]}` (good) and `{report.bad[:12]}` (bad)",
        "",
        " · ".join(f"{cls.value}: {n}" for cls, n in counts.items()) + f" (noise band {report.noise_band})",
        "",
    ]
    if report.failures:
        lines += ["| test | class | reason |", "| --- | --- | --- |"]
        order = {FailureClass.REGRESSION: 0, FailureClass.FLAKY: 1, FailureClass.INFRASTRUCTURE: 2}
        for f in sorted(report.failures, key=lambda f: order[f.failure_class]):
            lines.append(f"| `{_cell(f.test)}` | {f.failure_class.value} | {_cell(f.reason)} |")
        lines.append("")
    else:
        lines += ["The bad run has no failures.", ""]
    if counts[FailureClass.INFRASTRUCTURE]:
        lines += ["Infrastructure failures are reported, never bisected: re-run them on a healthy runner.", ""]
    lines += _suspect_lines(report)
    return "\n".join(lines).rstrip() + "\n"


def _suspect_lines(report: TriageReport) -> list[str]:
    if not report.suspects:
        return ["No suspects: both runs tested the same commit."]
    lines = [
        f"**Suspects** ({len(report.suspects)} commit(s) after the good one; files named by the regressions "
        "first, then newest first):",
        "",
        "| # | commit | PR | subject | author | why |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for rank, s in enumerate(report.suspects[:MAX_MARKDOWN_SUSPECTS], start=1):
        pr = f"#{s.commit.pr}" if s.commit.pr is not None else ""
        lines.append(
            f"| {rank} | `{s.commit.sha[:12]}` | {pr} | {_cell(s.commit.subject)} | {_cell(s.commit.author)} "
            f"| {_cell(s.reason)} |"
        )
    if len(report.suspects) > MAX_MARKDOWN_SUSPECTS:
        lines.append(f"| | ... {len(report.suspects) - MAX_MARKDOWN_SUSPECTS} more (see --format json) | | | | |")
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")
