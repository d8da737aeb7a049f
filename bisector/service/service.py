"""BisectService: what the write endpoints call. Submit (mirror fetched, spec built, bisect stored, job queued,
owned by its submitter), and on a job: cancel, rerun a step, mark a commit, resume it after a pause (its owner or
an admin only), its state."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from bisector.db.jobs import OWNER_KEY, SOURCE_KEY, SUBMISSION_KEY, JobRecord, duplicate_of
from bisector.db.store import Store
from bisector.report import BisectReport
from bisector.runner.coordinator import CancelOutcome, prepare_bisect
from bisector.runner.manual import MarkEffect, MarkOutcome, mark_commit
from bisector.service.config import ServiceConfig
from bisector.service.mirrors import Mirrors
from bisector.service.scheduler import JobScheduler, utc_now
from bisector.service.submission import build_submission, check_request
from bisector.service.tokens import Person
from bisector.vocab.domain import RERUN_STOP_WAIT_S, BisectStatus
from bisector.vocab.errors import InputError, StateError
from bisector.vocab.gitrepo import GitRepo


class NotYoursError(InputError):
    """A change to another person's job by someone who is not an admin (HTTP 403)."""


@dataclass(frozen=True)
class Submitted:
    id: int
    status: str  # the job's state: queued (or, for a repeated submission key, whatever it is now)
    owner: str
    repeated: bool = False  # the submission key was sent before: this is the job that submission made


@dataclass(frozen=True)
class Marked:
    outcome: MarkOutcome
    message: str  # what happens next, on this server


@dataclass(frozen=True)
class Resumed:
    resumed: bool  # False: its job was queued or running here already
    state: str  # the job's state now


def served_mark_message(outcome: MarkOutcome) -> str:
    """What happens next to a mark on this server, which runs its bisects itself, in neutral words: a face adds how
    its reader resumes a paused bisect (the answer's effect says so)."""
    bisect_id = outcome.bisect_id
    if outcome.effect is MarkEffect.TAKEN_IN:
        return f"bisect {bisect_id} is {outcome.status.value}: its coordinator takes the verdict in within a second"
    if outcome.effect is MarkEffect.AT_RESUME:
        return f"bisect {bisect_id} is {outcome.status.value}: resuming it on this server takes the verdict in"
    if outcome.effect is MarkEffect.REOPENED:
        return f"this changes the answer ({outcome.why}): bisect {bisect_id} is running again; this server resumes it"
    return outcome.message


class BisectService:
    def __init__(self, config: ServiceConfig, store: Store, mirrors: Mirrors, scheduler: JobScheduler) -> None:
        self.config = config
        self.store = store
        self.mirrors = mirrors
        self.scheduler = scheduler
        # Submissions are prepared one at a time: of many sent at once, the first is queued (and can start) after
        # its own preparation, not after all of theirs.
        self._submitting = threading.Lock()

    def submit(self, body: object, person: Person, submission_key: str | None = None) -> Submitted:
        """Store the requested bisect and queue it; a submission key this person sent before gets the job made then
        (a client's retry after its answer was lost), never a second one. InputError / CommandNotAllowedError /
        RepoError: nothing stored."""
        request = check_request(body)
        source = self.mirrors.allowed_source(request["repo"])
        with self._submitting:
            # Under the lock: a retry that came while its first try still fetched the mirror waits for that try's job.
            if submission_key is not None and (
                earlier := self.scheduler.queue.submitted_as(person.name, submission_key)
            ):
                return Submitted(earlier.bisect_id, earlier.state.value, person.name, repeated=True)
            mirror = self.mirrors.sync(source)
            submission = build_submission(self.config, mirror, source, request)
            # Its source and owner are stored with the bisect: a server that dies before queueing it queues it at
            # its next start (JobQueue.queue_stranded).
            served = {SOURCE_KEY: source, OWNER_KEY: person.name, SUBMISSION_KEY: submission_key,
                      "recipe": request.get("recipe"), "priority": submission.priority}  # fmt: skip
            bisect_id = prepare_bisect(self.store, submission.spec, extra=served)
            holder = self.scheduler.add(bisect_id, submission.priority, source, person.name, submission_key)
            if holder is not None:  # another server on this store took the same submission at once
                message = duplicate_of(holder.bisect_id)
                self.store.set_status(bisect_id, BisectStatus.CANCELLED, finished=utc_now(), message=message)
                return Submitted(holder.bisect_id, holder.state.value, person.name, repeated=True)
        return Submitted(bisect_id, "queued", person.name)

    def cancel(self, bisect_id: int, person: Person, wait_s: float = RERUN_STOP_WAIT_S) -> CancelOutcome:
        """End the bisect and its reruns (of a bisect that has ended, its reruns), waiting up to wait_s for them."""
        return self.scheduler.cancel(self._check_owner(bisect_id, person, "cancel"), wait_s)

    def rerun(self, bisect_id: int, person: Person, *, step: int | None = None, rev: str | None = None) -> str:
        """Run the bisect's build and test again, in the background, at its step `step` (as the report numbers it)
        or at revision rev (one of them); the commit it runs at."""
        job = self._check_owner(bisect_id, person, "rerun a step of")
        if (step is None) == (rev is None):
            raise InputError("give a step's number or a revision to rerun at (one of them)")
        if step is not None:
            sha = BisectReport.load(self.store, bisect_id).step(step).sha
        else:
            assert rev is not None
            sha = GitRepo(self.store.get_bisect(bisect_id).repo).resolve(rev)
        self.scheduler.rerun(job, sha)
        return sha

    def mark(self, bisect_id: int, rev: str, word: str, note: str, person: Person) -> Marked:
        """`bisect mark` by this person. A mark that reopens the bisect queues its job again: the server resumes it,
        as it runs a running one."""
        self._check_owner(bisect_id, person, "mark a commit of")
        outcome = mark_commit(self.store, bisect_id, rev, word, note=note, who=person.name)
        if outcome.reopened:
            self.scheduler.reopened(bisect_id)
        return Marked(outcome, served_mark_message(outcome))

    def resume(self, bisect_id: int, person: Person) -> Resumed:
        """`bisect resume` on this server: a bisect paused on a failing harness (fixed since) runs again, its job
        queued again; one whose job is open already is left to it. StateError for a bisect that has ended."""
        self._check_owner(bisect_id, person, "resume")
        status = self.store.get_bisect(bisect_id).status
        if status.is_terminal():
            raise StateError(f"bisect {bisect_id} is already {status.value}; nothing to resume")
        if status is BisectStatus.PAUSED:
            # Running again before its job is queued: a coordinator still returning from the pause then leaves the
            # job open (JobScheduler._run_job), as it does for a mark that reopens its bisect.
            self.store.set_status(bisect_id, BisectStatus.RUNNING, message=f"resumed after a pause by {person.name}")
        # Whatever state the job was read in: its coordinator may have returned (and marked it done) since.
        requeued = self.scheduler.reopened(bisect_id)
        return Resumed(status is BisectStatus.PAUSED or requeued, self.scheduler.queue.get(bisect_id).state.value)

    def job(self, bisect_id: int) -> JobRecord:
        return self.scheduler.queue.get(bisect_id)

    def _check_owner(self, bisect_id: int, person: Person, action: str) -> JobRecord:
        """The bisect's job, if person may change it."""
        job = self.scheduler.queue.get(bisect_id)
        if not person.may_act_on(job.owner):
            whose = f"it is {job.owner}'s" if job.owner else "it has no owner"
            raise NotYoursError(
                f"{person.name} may not {action} bisect {bisect_id}: {whose}; only its owner or an admin may"
            )
        return job
