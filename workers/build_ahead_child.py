"""The images built ahead of one bisect's steps on this host (`python -m bisector.workers.build_ahead_child`; the
coordinator's side is workers/build_ahead.py): one process for all of them, each build in a thread of its own
through the same ImageBuilder as a step's, so that a round's dozens of builds ahead pay for one interpreter.

Its stdin carries one JSON line per command: {"build": JOB} starts a build (JOB's env: the variables that differ from
this process's own environment, null for one it lacks), {"stop": SHA} cancels one. End of file
(the coordinator closed it, or died), SIGTERM, SIGINT or SIGHUP (a CI runner's or a terminal's, to the coordinator's
group) cancel every build, and the process exits once they have ended; a cancelled build leaves no image. It
prints `started SHA PGID START` as a build's command starts (START: its leader's start time, read before the leader
can be reaped) and `outcome JSON` as a build ends, and takes in orders while its output waits for a reader (the
coordinator writes a pass of orders before it reads again). Each build first takes one of the host's build-ahead
slots (workers/build_slots.py), and the process runs at a lower priority, so that the
builds and tests that steps wait for go first. A failed build keeps nothing either: a build ahead runs under other
conditions than a step (no GPU, CPUs shared with a test), so only a step's own build judges the commit.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from bisector.vocab.errors import RepoError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.processes import process_start
from bisector.workers.build_ahead import (
    ORDERS_PIPE_BYTES,
    AheadStatus,
    BuildAheadJob,
    BuildAheadOutcome,
    with_changes,
)
from bisector.workers.build_slots import LOOK_S, SLOTS_VARIABLE, slot_count, take_slot
from bisector.workers.images.builder import BuildJob, Evict, ImageBuilder, PreparedImage
from bisector.workers.images.cache import ImageCache
from bisector.workers.images.key import ImageRecipe, base_environment
from bisector.workers.output import StepLog
from bisector.workers.process import CancelSignal

NICENESS = 10  # added to a build's niceness: where CPUs are short, builds that steps wait for go first
DETAIL_CHARS = 500


def lower_priority(pgid: int) -> None:
    """A build started beside a test (on a Ray node, whose actor process cannot be reniced as a whole): its
    process group at NICENESS more than this process."""
    with contextlib.suppress(OSError):  # it ended already, or this user may not
        os.setpriority(os.PRIO_PGRP, pgid, min(os.getpriority(os.PRIO_PROCESS, 0) + NICENESS, 19))


class SharedEviction:
    """One LRU pass of the image cache for the builds that end together, rather than one each (a pass measures
    every image: dozens of builds ending at once would spend a core on them). A build that asks while a pass runs
    waits for the next one, which keeps its image too; each hears the ids its pass removed."""

    def __init__(self, cache: ImageCache) -> None:
        self.cache = cache
        self.changed = threading.Condition()
        self.wanted: set[str] = set()  # the images to keep in the next pass
        self.running = False
        self.started = 0  # passes started: the next one is number started + 1
        self.removed: dict[int, list[str]] = {}  # pass number -> the ids it removed

    def __call__(self, max_bytes: int, keep: frozenset[str]) -> list[str]:
        with self.changed:
            self.wanted |= keep
            mine = self.started + 1  # the first pass to start after this call keeps `keep`
            while mine not in self.removed and (self.running or self.started + 1 != mine):
                self.changed.wait()
            if mine in self.removed:
                return self.removed[mine]
            self.running, self.started = True, mine
            batch, self.wanted = frozenset(self.wanted), set()
        removed: list[str] = []
        try:
            removed = self.cache.evict(max_bytes, keep=batch)
            return removed
        finally:
            with self.changed:
                self.running = False
                self.removed[mine] = removed
                self.changed.notify_all()


def build(
    job: BuildAheadJob,
    cancel: CancelSignal,
    *,
    on_start: Callable[[int], None],
    cache: ImageCache | None = None,
    evict: Evict | None = None,
    opened: GitRepo | None = None,
) -> BuildAheadOutcome:
    """Make job's image as a step would (reused when it is there already) in cache (default: this host's), then let
    go of it; on_start hears the process group of each command the build starts; evict: as ImageBuilder's;
    opened: job's repository, opened already."""
    recipe = ImageRecipe(job.mode, job.inputs, job.max_bytes, job.artifact, job.patches, job.recipe_env)
    with Path(job.log_path).open("ab", buffering=0) as log_file:
        log = StepLog(log_file)
        log.note(f"# building the image of {job.sha[:12]} ahead of its step (pid {os.getpid()})\n")

        def waiting() -> None:
            log.note(f"# every build-ahead slot of this host is taken (${SLOTS_VARIABLE}={slot_count()}): waiting\n")

        slot = take_slot(cancel.is_set, waiting)
        if slot is None:
            return BuildAheadOutcome(job.sha, AheadStatus.CANCELLED)

        build_job = BuildJob(
            job.repo, job.sha, job.build_cmd, recipe, job.env, log, job.timeout_s, should_cancel=cancel.is_set,
            on_start=on_start, cancel_fd=cancel.fileno(), infra_patterns=job.infra_patterns, keep_failure=False,
            opened=opened,
        )  # fmt: skip
        try:
            with ImageBuilder(cache, evict).prepare(build_job) as prepared:
                return outcome_of(job.sha, prepared)
        finally:
            os.close(slot)
            log.finish()


def outcome_of(sha: str, prepared: PreparedImage) -> BuildAheadOutcome:
    info = prepared.info
    build_s = info.build_s if info is not None and not info.reused else 0.0
    if prepared.ready:
        status = AheadStatus.REUSED if info is not None and info.reused else AheadStatus.READY
        return BuildAheadOutcome(sha, status, build_s, image=info)
    if prepared.cancelled:
        return BuildAheadOutcome(sha, AheadStatus.CANCELLED)
    if prepared.timed_out:
        return BuildAheadOutcome(sha, AheadStatus.TIMED_OUT)
    if prepared.failed_build:
        return BuildAheadOutcome(sha, AheadStatus.FAILED, build_s, prepared.failed_build[-DETAIL_CHARS:])
    return BuildAheadOutcome(sha, AheadStatus.ERROR, build_s, prepared.error[-DETAIL_CHARS:])


class BuildServer:
    """The builds of this process, each in a thread with its own cancel signal; output lines are whole."""

    def __init__(self) -> None:
        base_environment()  # every build's key needs it: read once here, not by each of the builds started together
        self.eviction = SharedEviction(ImageCache())
        self.cancels: dict[str, CancelSignal] = {}
        self.repos: dict[str, GitRepo] = {}  # path -> the repository, opened as its first build is ordered
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()  # the cancels and ending: the reader of the orders takes it
        self.printing = threading.Lock()  # stdout, whose reader may not read while it writes orders: never self.lock
        self.ending = False  # every build cancelled: those asked for later too
        self.input_ended = threading.Event()
        self.signalled = False

    def command(self, line: bytes, released: threading.Event) -> None:
        """Carry out one order; a build waits for released (set once the orders that came with it are taken in)."""
        order = json.loads(line)
        if "stop" in order:
            with self.lock:
                if (cancel := self.cancels.get(order["stop"])) is not None:
                    cancel.set()
            return
        job = BuildAheadJob.from_json({**order["build"], "env": with_changes(os.environ, order["build"]["env"])})
        if job.repo not in self.repos:
            with contextlib.suppress(RepoError):  # each build opens it then, and fails as a step would
                self.repos[job.repo] = GitRepo(job.repo)
        cancel = CancelSignal()
        with self.lock:
            if self.ending:
                cancel.set()
            self.cancels[job.sha] = cancel
        thread = threading.Thread(
            target=self.run, args=(job, cancel, released), name=f"build-{job.sha[:12]}", daemon=True
        )
        self.threads.append(thread)
        thread.start()

    def run(self, job: BuildAheadJob, cancel: CancelSignal, released: threading.Event) -> None:
        released.wait()
        try:
            outcome = build(
                job, cancel, on_start=lambda pgid: self.say(f"started {job.sha} {pgid} {process_start(pgid)}"),
                evict=self.eviction, opened=self.repos.get(job.repo),
            )  # fmt: skip
        except Exception as exc:  # any failure is this build's, told to the coordinator
            detail = f"{type(exc).__name__}: {exc}"[:DETAIL_CHARS]
            outcome = BuildAheadOutcome(job.sha, AheadStatus.ERROR, detail=detail)
        with self.lock:
            self.cancels.pop(job.sha, None)
        cancel.close()
        self.say("outcome " + json.dumps(outcome.to_json()))

    def say(self, line: str) -> None:
        with self.printing:
            print(line, flush=True)

    def read_commands(self, fd: int = 0) -> None:
        """From fd until end of file, unbuffered (a thread blocked here holds no lock the interpreter's exit needs).
        The builds ordered together start once all of them are taken in: a build's own work would hold up the rest."""
        pending = b""
        while chunk := os.read(fd, ORDERS_PIPE_BYTES):
            *lines, pending = (pending + chunk).split(b"\n")
            released = threading.Event()
            try:
                for line in lines:
                    if line.strip():
                        self.command(line, released)
            finally:
                released.set()
        self.input_ended.set()

    def end(self) -> None:
        """Cancel every build (and any asked for later) and wait for them all."""
        with self.lock:
            self.ending = True
            for cancel in self.cancels.values():
                cancel.set()
        for thread in list(self.threads):
            thread.join()


def main() -> None:
    os.nice(NICENESS)
    server = BuildServer()
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(stop, lambda signum, frame: setattr(server, "signalled", True))
    threading.Thread(target=server.read_commands, name="commands", daemon=True).start()
    while not (server.input_ended.wait(LOOK_S) or server.signalled):  # a signal is seen at the next look
        pass
    server.end()


if __name__ == "__main__":
    main()
