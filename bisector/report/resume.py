"""Whether a bisect waits for a resume, and the `bisect` command lines a face advises for it.

The store states facts and actions in neutral words ("fix it, then resume the bisect"); each face adds the way its
reader resumes: the local CLI `bisect resume ID`, the CLI with --server that command with its flags, the dashboard a
Resume button, JSON the `resume` key. A bisect a server stored (a served bisect) is resumed, and its steps rerun, on
that server.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from enum import StrEnum

from bisector.core.spec import BisectSpec
from bisector.db.jobs import SOURCE_KEY
from bisector.vocab.domain import DISK_FULL_ADVICE, PAUSE_ADVICE, BisectRecord, BisectStatus

PLACEHOLDER_SERVER = "--server URL"  # a served bisect read from its store: the reader knows no address of the server
# The advice of rows stored before the neutral words, which named the local command, and today's words for it.
OLD_ADVICE = (
    ("fix it, then `bisect resume {id}`", PAUSE_ADVICE),
    ("free space and `bisect resume {id}`", DISK_FULL_ADVICE),
)


class ResumeReason(StrEnum):
    """Why a resume is what the bisect waits for."""

    PAUSED = "paused"  # the harness kept failing: once it is fixed, a resume runs the bisect again
    UNOWNED = "unowned"  # running, but no coordinator holds it (stopped or died): a resume continues it
    EXPLANATION = "explanation"  # found, its culprit's explanation cut short by a stop: a resume finishes it


def is_served(record: BisectRecord) -> bool:
    """Whether a `bisect serve` stored the bisect (its job runs there, and a resume goes to that server)."""
    return isinstance(record.extra.get(SOURCE_KEY), str)


def resume_reason(record: BisectRecord) -> ResumeReason | None:
    """Why the bisect waits for a resume; None when it does not. A served bisect waits only when paused: its server
    runs its running ones itself (and again at its next start)."""
    if record.status is BisectStatus.PAUSED:
        return ResumeReason.PAUSED
    if is_served(record) or record.owner is not None:
        return None
    if record.status is BisectStatus.RUNNING:
        return ResumeReason.UNOWNED
    if record.status is BisectStatus.FOUND and record.extra.get("analysis") == "pending":
        return ResumeReason.EXPLANATION
    return None


def resume_json(record: BisectRecord) -> dict[str, object] | None:
    """The report's `resume` key: why the bisect waits for a resume, and whether it is its server's to resume (POST
    /api/bisects/ID/resume there) rather than the store's reader's (`bisect resume ID`); None when none is needed."""
    reason = resume_reason(record)
    return None if reason is None else {"reason": reason.value, "served": is_served(record)}


def neutral_words(text: str, bisect_id: int) -> str:
    """A stored message or step detail in today's words: an old row's `bisect resume ID` advice made neutral."""
    for old, new in OLD_ADVICE:
        text = text.replace(old.format(id=bisect_id), new)
    return text


@dataclass(frozen=True)
class Commands:
    """The `bisect` command lines a face advises, as its reader runs them. server_flags: how the reader's `bisect`
    reaches the bisect's store (`--server URL [--token-file F]`); empty for a reader of the store itself."""

    server_flags: str = ""

    def line(self, verb: str, arguments: int | str, served: bool = False) -> str:
        """`bisect VERB [flags] ARGUMENTS` (the bisect's id, and what else the verb takes); served: the command goes
        to the bisect's server, named by placeholder for a reader of its store."""
        flags = self.server_flags or (PLACEHOLDER_SERVER if served else "")
        return f"bisect {verb} {flags + ' ' if flags else ''}{arguments}"

    def resume(self, record: BisectRecord) -> str | None:
        """The command that resumes the bisect; None when it waits for no resume."""
        return self.line("resume", record.id, is_served(record)) if resume_reason(record) is not None else None

    def rerun(self, record: BisectRecord, sha: str) -> str:
        """The command that runs the bisect's build and test again at sha, on its image where it used images; a served
        bisect's on its server (in the background), where its images are."""
        return self.line("run-at", f"--bisect {record.id} {sha[:12]}", is_served(record))

    def search_merge(self, record: BisectRecord, spec: BisectSpec, merge: str, first_parent: str) -> str:
        """How to search the commits a merge found bad brought in: the bisect again with --all-parents, from the
        merge's first parent (found good) to the merge, so that only its branch is searched. A served bisect is
        submitted to its server again, with its recipe or command."""
        if is_served(record):
            return f"submit it again from {first_parent[:12]} to {merge[:12]} with --all-parents (`bisect submit`)"
        narrowed = replace(spec, good=first_parent, bad=merge, dates={}, search=replace(spec.search, all_parents=True))
        return shlex.join(["bisect", "start", *narrowed.start_arguments()])

    def report_hint(self, bisect_id: int) -> str:
        """The status's last line: the command that prints the whole report."""
        return f"the whole report: {self.line('report', bisect_id)}"


LOCAL = Commands()
