"""--prune auto in the report: what left the search before it started, and why."""

from __future__ import annotations

from bisector.core.prune import Reach
from bisector.report.model import BisectReport

MAX_PRUNED_LISTED = 20  # the text report names this many pruned commits; the JSON report has them all


def pruning_lines(report: BisectReport) -> list[str]:
    """What the probe left out of the search and why, or why it left nothing out; none without --prune auto."""
    plan = report.records.pruning
    if plan is None:
        return []
    removed = [sha for sha in report.candidates.shas() if sha in plan.removed()]
    lines = [f"--prune auto: {plan.note}"]
    lines += [f"  {sha[:12]}: {pruned_why(report, sha)}" for sha in removed[:MAX_PRUNED_LISTED]]
    if len(removed) > MAX_PRUNED_LISTED:
        lines.append(f"  ... {len(removed) - MAX_PRUNED_LISTED} more (the JSON report lists every commit)")
    return lines


def pruned_why(report: BisectReport, sha: str) -> str:
    """Why a commit left the search, and the verdict it shares ("" for a commit that was searched)."""
    plan = report.records.pruning
    reach = plan.commits.get(sha) if plan is not None and sha in plan.removed() else None
    if reach is None or reach.same_as is None:
        return ""
    shared = report.state_of(reach.same_as)
    verdict = f": {report.word(shared)}, reused" if shared is not None else ""
    if reach.reach is Reach.UNSEEN:
        return f"touches nothing the test or build can see; verdict of {reach.same_as[:12]}{verdict}"
    return f"the test sees the same tree as at {reach.same_as[:12]} ({', '.join(reach.paths)}){verdict}"
