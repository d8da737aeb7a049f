"""Reports read the store and render one bisect: terminal (rich), Markdown for a PR, JSON for tools."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from bisector.analysis import Explanation, explanation_json, text_renderables
from bisector.analysis import render_markdown as render_markdown_explanation
from bisector.domain import BisectRecord, BisectStatus, Commit, StepPurpose, StepRecord, Verdict
from bisector.explain import stored_explanation
from bisector.spec import BisectSpec
from db.store import Store
from workers.step import reproduce_command

MAX_RANGE_ROWS = 40  # the text report elides the middle of longer ranges


@dataclass(frozen=True)
class BisectReport:
    record: BisectRecord
    spec: BisectSpec
    candidates: list[Commit]
    steps: list[StepRecord]
    explanation: Explanation | None = None

    @classmethod
    def load(cls, store: Store, bisect_id: int) -> BisectReport:
        record = store.get_bisect(bisect_id)
        return cls(
            record,
            BisectSpec.from_json(record.spec),
            store.candidates(bisect_id),
            store.steps(bisect_id),
            stored_explanation(store, bisect_id),
        )

    def commit(self, sha: str | None) -> Commit | None:
        return next((c for c in self.candidates if c.sha == sha), None) if sha else None

    @property
    def evidence(self) -> list[StepRecord]:
        """The steps the search judged by: search and confirmation runs of workers not quarantined."""
        quarantined = self.record.extra.get("quarantined") or {}
        return [
            s
            for s in self.steps
            if s.purpose in (StepPurpose.SEARCH, StepPurpose.CONFIRM) and s.worker not in quarantined  # type: ignore[operator]
        ]

    def decided_step(self, sha: str | None) -> StepRecord | None:
        decided = [s for s in self.evidence if s.sha == sha and s.verdict in (Verdict.GOOD, Verdict.BAD)]
        return decided[-1] if decided else None

    def metric(self, sha: str | None) -> float | None:
        step = self.decided_step(sha)
        return step.metric if step else None

    def position(self, sha: str) -> int:
        commit = self.commit(sha)
        return commit.position if commit else -1

    def verdict_of(self, sha: str) -> Verdict | None:
        verdicts = [s.verdict for s in self.evidence if s.sha == sha and s.verdict is not None]
        decided = [v for v in verdicts if v in (Verdict.GOOD, Verdict.BAD, Verdict.SKIP)]
        if decided:
            return decided[-1]
        return verdicts[-1] if verdicts else None

    @property
    def gpu_seconds(self) -> float:
        return sum(_duration(s) * len(s.gpus) for s in self.steps)

    @property
    def slot_seconds(self) -> float:
        return sum(_duration(s) for s in self.steps)

    @property
    def wall_s(self) -> float | None:
        if self.record.finished is None:
            return None
        return (self.record.finished - self.record.created).total_seconds()

    def suspects(self) -> list[Commit]:
        """With an ambiguous result, the commits that could be the first bad one."""
        first_bad, last_good = self.commit(self.record.first_bad), self.commit(self.record.last_good)
        if first_bad is None or last_good is None:
            return []
        return [c for c in self.candidates if last_good.position < c.position <= first_bad.position]

    def noise_lines(self) -> list[str]:
        """Repeats, flakes and the confirmation, when the bisect had any."""
        lines = []
        extra = self.record.extra
        if self.spec.repeat_limit > 1:
            lines.append(f"runs per commit: {self.spec.repeat} (up to {self.spec.repeat_limit} while uncertain)")
        if extra.get("flake_seen"):
            lines.append("flaky results were seen: a commit tested both ways; the noisy strategy took over")
        quarantined = extra.get("quarantined")
        if isinstance(quarantined, dict):
            lines += [f"quarantined {worker}: {reason}" for worker, reason in sorted(quarantined.items())]
        confirmation = extra.get("confirmation")
        if isinstance(confirmation, dict):
            lines.append(
                f"confirmation: {confirmation.get('status')}, {confirmation.get('reason')} "
                f"(confidence {float(str(confirmation.get('confidence', 0))):.3f})"
            )
        return lines

    def reproduce(self) -> str:
        sha = self.record.first_bad or self.record.bad
        step = self.decided_step(sha)
        env = dict(self.spec.env)
        if step and step.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in step.gpus)
        return reproduce_command(self.record.repo, sha, self.spec.build, self.spec.run, env)

    def to_json(self) -> dict[str, object]:
        first_bad, last_good = self.commit(self.record.first_bad), self.commit(self.record.last_good)
        return {
            "id": self.record.id,
            "status": self.record.status.value,
            "message": self.record.message,
            "repo": self.record.repo,
            "good": self.record.good,
            "bad": self.record.bad,
            "created": self.record.created.isoformat(),
            "finished": self.record.finished.isoformat() if self.record.finished else None,
            "first_bad": _commit_json(first_bad, self.metric(self.record.first_bad)) if first_bad else None,
            "last_good": _commit_json(last_good, self.metric(self.record.last_good)) if last_good else None,
            "suspects": [c.sha for c in self.suspects()] if self.record.status is BisectStatus.AMBIGUOUS else [],
            "candidates": len(self.candidates),
            "steps": [self._step_json(s) for s in self.steps],
            "gpu_seconds": round(self.gpu_seconds, 3),
            "slot_seconds": round(self.slot_seconds, 3),
            "wall_s": round(self.wall_s, 3) if self.wall_s is not None else None,
            "spec": self.spec.to_json(),
            "reproduce": self.reproduce(),
            "explanation": explanation_json(self.explanation) if self.explanation else None,
            "confirmation": self.record.extra.get("confirmation"),
            "decisions": self.record.extra.get("decisions", {}),
            "flake_seen": bool(self.record.extra.get("flake_seen", False)),
            "quarantined": self.record.extra.get("quarantined", {}),
        }

    def _step_json(self, step: StepRecord) -> dict[str, object]:
        return {
            "id": step.id,
            "sha": step.sha,
            "position": self.position(step.sha),
            "attempt": step.attempt,
            "started": step.started.isoformat(),
            "finished": step.finished.isoformat() if step.finished else None,
            "verdict": step.verdict.value if step.verdict else "running",
            "metric": step.metric,
            "samples": list(step.samples),
            "worker": step.worker,
            "node": step.node,
            "gpus": list(step.gpus),
            "build_s": step.build_s,
            "run_s": step.run_s,
            "exit_code": step.exit_code,
            "error_kind": step.error_kind.value if step.error_kind else None,
            "purpose": step.purpose.value,
            "detail": step.detail,
            "log_path": step.log_path,
            "image": step.image,  # {id, source, reused, build_s} of the worker image it ran on; None: no image
        }


def _duration(step: StepRecord) -> float:
    return (step.finished - step.started).total_seconds() if step.finished else 0.0


def _commit_json(commit: Commit, metric: float | None) -> dict[str, object]:
    return {
        "sha": commit.sha,
        "position": commit.position,
        "subject": commit.subject,
        "author": commit.author,
        "date": commit.date.isoformat(),
        "pr": commit.pr,
        "metric": metric,
    }


def render_json(report: BisectReport) -> str:
    return json.dumps(report.to_json(), indent=2)


# --- text (rich) -------------------------------------------------------------------------------------------

_VERDICT_STYLE = {
    Verdict.GOOD: "green",
    Verdict.BAD: "red",
    Verdict.SKIP: "yellow",
    Verdict.ERROR: "magenta",
    Verdict.CANCELLED: "dim",
}


def _fmt_metric(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if 1e-3 <= abs(value) < 1e5 else f"{value:.4g}"


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _fmt_date(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC")


def print_text(console: Console, report: BisectReport) -> None:
    record = report.record
    first_bad, last_good = report.commit(record.first_bad), report.commit(record.last_good)
    title = f"bisect {record.id}: {record.status.value}"
    lines = [record.message] if record.message and record.status is not BisectStatus.FOUND else []
    if first_bad is not None:
        label = "first bad commit" if record.status is BisectStatus.FOUND else "first commit known bad"
        lines += [
            f"{label}: {first_bad.sha}",
            f"  {first_bad.subject}" + (f"  (PR #{first_bad.pr})" if first_bad.pr else ""),
            f"  {first_bad.author}, {_fmt_date(first_bad.date)}",
            f"  metric {_fmt_metric(report.metric(first_bad.sha))}",
        ]
    if last_good is not None:
        lines += [
            f"last good commit: {last_good.sha}",
            f"  {last_good.subject}",
            f"  metric {_fmt_metric(report.metric(last_good.sha))}",
        ]
    if record.status is BisectStatus.AMBIGUOUS:
        lines.append("could be any of: " + ", ".join(f"{c.sha[:12]} {c.subject}" for c in report.suspects()))
    lines += report.noise_lines()
    expect = report.spec.expect or "exit code"
    lines.append(
        f"{len(report.candidates)} commits in range, {len(report.steps)} steps, "
        f"{report.slot_seconds:.1f} slot-seconds, {report.gpu_seconds:.1f} GPU-seconds, "
        f"wall {_fmt_s(report.wall_s)}; judged by {expect}"
    )
    style = "green" if record.status is BisectStatus.FOUND else "yellow"
    console.print(Panel("\n".join(lines), title=title, border_style=style, expand=False))

    steps = Table(title="steps", show_lines=False)
    for column in ("#", "pos", "commit", "verdict", "metric", "worker", "GPUs", "build", "run"):
        steps.add_column(column, no_wrap=True)
    steps.add_column("detail", overflow="fold")
    for step in report.steps:
        verdict = step.verdict.value if step.verdict else "running"
        style = _VERDICT_STYLE.get(step.verdict, "") if step.verdict else "cyan"
        decided = step.verdict in (Verdict.GOOD, Verdict.BAD)
        detail = step.detail.splitlines()[0] if step.detail and not decided else ""
        steps.add_row(
            str(step.id), str(report.position(step.sha)), step.sha[:12], f"[{style}]{verdict}[/]",
            _fmt_metric(step.metric), step.worker, ",".join(map(str, step.gpus)) or "-",
            _fmt_s(step.build_s), _fmt_s(step.run_s), detail[:60],
        )  # fmt: skip
    console.print(steps)

    commits = Table(title="commits in range (oldest first)")
    for column in ("pos", "commit", "verdict"):
        commits.add_column(column, no_wrap=True)
    commits.add_column("subject", overflow="fold")
    rows = report.candidates
    if len(rows) > MAX_RANGE_ROWS:
        keep = {c.position for c in rows[:5] + rows[-5:]}
        keep |= {report.position(s.sha) for s in report.steps}
        if first_bad is not None:
            keep |= {first_bad.position - 1, first_bad.position, first_bad.position + 1}
        rows = [c for c in rows if c.position in keep]
    previous = -1
    for commit in rows:
        if commit.position != previous + 1:
            commits.add_row("...", "", "", f"[dim]{commit.position - previous - 1} untested commits[/]")
        previous = commit.position
        commit_verdict = report.verdict_of(commit.sha)
        mark = "  <- first bad" if commit.sha == record.first_bad else ""
        commits.add_row(
            str(commit.position), commit.sha[:12],
            f"[{_VERDICT_STYLE[commit_verdict]}]{commit_verdict.value}[/]" if commit_verdict else "",
            commit.subject + mark,
        )  # fmt: skip
    console.print(commits)
    if report.explanation is not None:
        for renderable in text_renderables(report.explanation):
            console.print(renderable)
    console.print(f"reproduce one step:\n  {report.reproduce()}", soft_wrap=True)


# --- Markdown ----------------------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: BisectReport) -> str:
    record = report.record
    first_bad, last_good = report.commit(record.first_bad), report.commit(record.last_good)
    out = [f"### gpu-bisect #{record.id}: {record.status.value}", ""]
    if record.message:
        out += [record.message, ""]
    if first_bad is not None:
        pr = f" (PR #{first_bad.pr})" if first_bad.pr else ""
        out += [
            f"**First bad commit:** `{first_bad.sha}` {_md_escape(first_bad.subject)}{pr}  ",
            f"{_md_escape(first_bad.author)}, {_fmt_date(first_bad.date)}, metric "
            f"**{_fmt_metric(report.metric(first_bad.sha))}**",
            "",
        ]
    if last_good is not None:
        out += [
            f"**Last good commit:** `{last_good.sha}` {_md_escape(last_good.subject)}, metric "
            f"**{_fmt_metric(report.metric(last_good.sha))}**",
            "",
        ]
    if record.status is BisectStatus.AMBIGUOUS:
        out += ["Could be any of:", *[f"- `{c.sha[:12]}` {_md_escape(c.subject)}" for c in report.suspects()], ""]
    if noise := report.noise_lines():
        out += [*[f"- {line}" for line in noise], ""]
    out += [
        f"Judged by `{report.spec.expect or 'exit code'}` on `{_md_escape(report.spec.run)}`; "
        f"{len(report.candidates)} commits in range, {len(report.steps)} steps, "
        f"{report.gpu_seconds:.1f} GPU-seconds ({report.slot_seconds:.1f} slot-seconds), "
        f"wall {_fmt_s(report.wall_s)}.",
        "",
        "<details><summary>Steps</summary>",
        "",
        "| # | position | commit | verdict | metric | worker | GPUs | build | run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for step in report.steps:
        verdict = step.verdict.value if step.verdict else "running"
        out.append(
            f"| {step.id} | {report.position(step.sha)} | `{step.sha[:12]}` | {verdict} | {_fmt_metric(step.metric)} "
            f"| {step.worker} | {','.join(map(str, step.gpus)) or '-'} "
            f"| {_fmt_s(step.build_s)} | {_fmt_s(step.run_s)} |"
        )
    out += ["", "</details>", ""]
    if report.explanation is not None:
        out += [render_markdown_explanation(report.explanation), ""]
    out += ["Reproduce one step:", "", "```sh", report.reproduce(), "```", ""]
    return "\n".join(out)
