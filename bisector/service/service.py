"""BisectService: what the write endpoints call. Submit (mirror fetched, spec built, bisect stored, job queued),
cancel, and a job's state."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from bisector.db.jobs import SOURCE_KEY, JobRecord
from bisector.db.store import Store
from bisector.runner.coordinator import prepare_bisect
from bisector.service.config import ServiceConfig
from bisector.service.mirrors import Mirrors
from bisector.service.scheduler import JobScheduler
from bisector.service.submission import build_submission, check_request


@dataclass(frozen=True)
class Submitted:
    id: int
    status: str  # the job's state: queued


class BisectService:
    def __init__(self, config: ServiceConfig, store: Store, mirrors: Mirrors, scheduler: JobScheduler) -> None:
        self.config = config
        self.store = store
        self.mirrors = mirrors
        self.scheduler = scheduler
        # Submissions are prepared one at a time: of many sent at once, the first is queued (and can start) after
        # its own preparation, not after all of theirs.
        self._submitting = threading.Lock()

    def submit(self, body: object) -> Submitted:
        """Store the requested bisect and queue it. InputError / CommandNotAllowedError / RepoError: nothing stored."""
        request = check_request(body)
        source = self.mirrors.allowed_source(request["repo"])
        with self._submitting:
            mirror = self.mirrors.sync(source)
            submission = build_submission(self.config, mirror, source, request)
            # Its source is stored with the bisect: a server that dies before queueing it queues it at its next
            # start (JobQueue.queue_stranded).
            served = {SOURCE_KEY: source, "recipe": request.get("recipe"), "priority": submission.priority}
            bisect_id = prepare_bisect(self.store, submission.spec, extra=served)
            self.scheduler.add(bisect_id, submission.priority, source)
        return Submitted(bisect_id, "queued")

    def cancel(self, bisect_id: int) -> JobRecord:
        return self.scheduler.cancel(bisect_id)

    def job(self, bisect_id: int) -> JobRecord:
        return self.scheduler.queue.get(bisect_id)
