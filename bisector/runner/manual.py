"""A person's verdicts: `bisect mark` (one commit of a running or finished bisect) and `bisect replay` (a git
bisect log's verdicts entering a new bisect). Both store manual steps (purpose manual: no test ran, detail says
who gave the verdict and why); the search counts a manual verdict as the commit's decided verdict.

A mark on a running bisect is taken in by its coordinator within a second (`bisect resume` does, if none runs);
one on a paused bisect, which no coordinator runs, by `bisect resume`. A mark on a finished bisect is stored and
the answer re-judged: a mark that contradicts it (a commit at or before the last good one marked bad, at or after
the first bad one marked good, a skip of either, any verdict inside an ambiguous range, a verdict on an endpoint
of a bisect that failed there) reopens the bisect (back to running, with a message) for `bisect resume` to
finish; a mark that agrees with the answer changes nothing. A cancelled bisect stays cancelled. The outcome says
which of these happened (MarkEffect): each face words it for its users.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from bisector.core.spec import BisectSpec
from bisector.core.terms import new_verdict, old_verdict, verdict_for
from bisector.db.jobs import JobQueue
from bisector.db.store import Store
from bisector.report import BisectReport
from bisector.report.gitlog import GitLog
from bisector.report.resume import LOCAL, is_served
from bisector.vocab.domain import BisectRecord, BisectStatus, Commit, Verdict
from bisector.vocab.errors import InputError, StateError
from bisector.vocab.gitrepo import GitRepo

REOPENABLE = (
    BisectStatus.FOUND,
    BisectStatus.AMBIGUOUS,
    BisectStatus.NOT_REPRODUCIBLE,
    BisectStatus.ENDPOINTS_MISMATCH,
    BisectStatus.FAILED,
)


class MarkEffect(StrEnum):
    """What becomes of a stored mark: who takes it in, and when."""

    TAKEN_IN = "taken_in"  # the bisect runs: its coordinator takes the verdict in (`bisect resume`, if none runs)
    AT_RESUME = "at_resume"  # the bisect is paused: no coordinator runs it; it is taken in when it is resumed
    REOPENED = "reopened"  # it changes a finished bisect's answer: the bisect runs again, resumed to finish
    AGREES = "agrees"  # it agrees with the finished bisect's answer: nothing changes
    KEPT = "kept"  # the bisect stays as it ended (cancelled)


@dataclass(frozen=True)
class MarkOutcome:
    bisect_id: int
    step_id: int  # the manual step's id in the store
    number: int  # the manual step's number as the bisect's report numbers its steps
    commit: Commit
    verdict: Verdict
    status: BisectStatus  # the bisect's status when the mark came (before any reopening)
    effect: MarkEffect
    why: str = ""  # REOPENED: how the verdict contradicts the answer
    served: bool = False  # a `bisect serve` stored the bisect: it is resumed on that server

    @property
    def reopened(self) -> bool:
        return self.effect is MarkEffect.REOPENED

    @property
    def message(self) -> str:
        """What happens next, in the words of a person holding the store (the local `bisect mark`), whose resume of a
        served bisect goes to its server (report/resume.py); a face that runs the bisect itself (a server) words the
        effect its own way."""
        bisect_id, status = self.bisect_id, self.status.value
        resume = f"`{LOCAL.line('resume', bisect_id, self.served)}`"
        if_none = "its server runs it again" if self.served else resume  # as `bisect status` says (report/status.py)
        return {
            MarkEffect.TAKEN_IN: f"bisect {bisect_id} is {status}: its coordinator takes the verdict in within a "
            f"second (if none runs, {if_none})",
            MarkEffect.AT_RESUME: f"bisect {bisect_id} is {status}: no coordinator runs it; {resume} takes the "
            "verdict in",
            MarkEffect.REOPENED: f"this changes the answer ({self.why}): bisect {bisect_id} is running again; "
            + ("its job is queued again on its server" if self.served else f"{resume} finishes it"),
            MarkEffect.AGREES: f"stored; it agrees with the answer of bisect {bisect_id}",
            MarkEffect.KEPT: f"stored; bisect {bisect_id} stays {status}",
        }[self.effect]


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def manual_detail(word: str, who: str, note: str) -> str:
    return f"marked {word} by {who}" + (f": {note}" if note else "")


def mark_commit(store: Store, bisect_id: int, rev: str, word: str, *, note: str = "", who: str = "") -> MarkOutcome:
    record = store.get_bisect(bisect_id)
    spec = BisectSpec.from_json(record.spec)
    verdict = verdict_for(spec, word)
    repo = GitRepo(record.repo)
    commit = _candidate(store, record, repo.resolve(rev))
    _check_endpoint_mark(spec, record, commit)
    if not commit.described:  # shown in its reports from now on
        [commit] = repo.describe([commit])
        store.describe(bisect_id, [commit])
    step_id = store.add_manual_step(
        bisect_id, commit.sha, verdict, manual_detail(word, who or current_user(), note), datetime.now(UTC)
    )
    effect, why = _mark_effect(store, record, spec, commit, verdict)
    if effect is MarkEffect.REOPENED:
        store.reopen(
            bisect_id,
            record.status,
            f"reopened: {commit.sha[:12]} was marked {word} ({why}); it had ended {record.status.value}: "
            f"{record.message}",
        )
        if is_served(record):  # its server's next round takes the job up again, as after a mark sent to it
            JobQueue(store).requeue(bisect_id)
    report = BisectReport.load(store, bisect_id)
    number = next(report.number(step) for step in report.steps if step.id == step_id)
    return MarkOutcome(bisect_id, step_id, number, commit, verdict, record.status, effect, why, is_served(record))


def _mark_effect(
    store: Store, record: BisectRecord, spec: BisectSpec, commit: Commit, verdict: Verdict
) -> tuple[MarkEffect, str]:
    if record.status is BisectStatus.PAUSED:
        return MarkEffect.AT_RESUME, ""
    if not record.status.is_terminal():
        return MarkEffect.TAKEN_IN, ""
    if record.status not in REOPENABLE:
        return MarkEffect.KEPT, ""
    why = changed_answer(store, record, spec, commit, verdict)
    return (MarkEffect.AGREES, "") if why is None else (MarkEffect.REOPENED, why)


def changed_answer(
    store: Store, record: BisectRecord, spec: BisectSpec, commit: Commit, verdict: Verdict
) -> str | None:
    """Why a verdict on commit contradicts the finished bisect's answer, or None when it agrees with it."""
    if record.status in (BisectStatus.ENDPOINTS_MISMATCH, BisectStatus.FAILED):
        return "the bisect ended at its endpoints" if commit.sha in (record.good, record.bad) else None
    positions = store.candidates(record.id).position
    last_good, first_bad = positions.get(record.last_good or ""), positions.get(record.first_bad or "")
    if last_good is None or first_bad is None:
        return None
    old, new = spec.search.terms()
    at = commit.position
    if verdict is Verdict.SKIP:
        return "a skip beside the boundary" if at in (last_good, first_bad) else None
    if record.status is BisectStatus.NOT_REPRODUCIBLE and at in (last_good, first_bad):
        return "a verdict on the commits the confirmation could not tell apart"
    if verdict is new_verdict(spec) and at <= last_good:
        return f"{new} at or before the last {old} commit"
    if verdict is old_verdict(spec) and at >= first_bad:
        return f"{old} at or after the first {new} commit"
    if last_good < at < first_bad:
        return "a verdict inside the range the bisect could not narrow"
    return None


def store_log_marks(store: Store, bisect_id: int, log: GitLog, source: str, who: str = "") -> list[str]:
    """Store a git bisect log's verdicts as manual steps of a new bisect (before its search runs). Returns a
    warning line for each mark of a commit that is not a candidate (outside the range, off the first-parent
    chain, or not touching the paths): git would have used it, this search cannot."""
    record = store.get_bisect(bisect_id)
    spec = BisectSpec.from_json(record.spec)
    repo = GitRepo(record.repo)
    candidates = store.candidates(bisect_id)
    warnings, when = [], datetime.now(UTC)
    for mark in log.marks:
        sha = repo.resolve(mark.rev)
        commit = candidates.commit(sha)
        if commit is None:
            warnings.append(
                f"{source}:{mark.line}: {sha[:12]} is not a candidate of this bisect; its verdict is left out"
            )
            continue
        _check_endpoint_mark(spec, record, commit)
        word = {"old": spec.search.terms()[0], "new": spec.search.terms()[1]}.get(mark.state, mark.state)
        note = f"from {source} line {mark.line}"
        store.add_manual_step(
            bisect_id, sha, verdict_for(spec, word), manual_detail(word, who or current_user(), note), when
        )
    return warnings


def endpoints_from_log(log: GitLog) -> tuple[str | None, str | None]:
    """(good, bad) as git's replay starts them: the log's first old mark and its first new mark."""
    good = next((m.rev for m in log.marks if m.state == "old"), None)
    bad = next((m.rev for m in log.marks if m.state == "new"), None)
    return good, bad


def _candidate(store: Store, record: BisectRecord, sha: str) -> Commit:
    commit = store.candidates(record.id).commit(sha)
    if commit is None:
        paths = BisectSpec.from_json(record.spec).test.paths
        touching = f" touching {' '.join(paths)}" if paths else ""
        raise InputError(
            f"{sha[:12]} is not a candidate of bisect {record.id} (its range is the first-parent chain from "
            f"{record.good[:12]} to {record.bad[:12]}{touching})"
        )
    return commit


def _check_endpoint_mark(spec: BisectSpec, record: BisectRecord, commit: Commit) -> None:
    if spec.test.expect == "auto" and commit.sha in (record.good, record.bad):
        raise StateError(
            "--expect auto judges commits against the endpoints' samples, which a verdict by hand has none of: "
            "mark commits between the endpoints"
        )
