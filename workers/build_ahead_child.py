"""One image built ahead of its step (`python -m workers.build_ahead_child`; the coordinator's side is
workers/build_ahead.py): the job comes as one JSON line on stdin, the build goes through the same ImageBuilder as
a step's, the outcome is printed as one line at the end.

It is cancelled at once by end of file on stdin (the coordinator stopped it, or died) or by SIGTERM, SIGINT or
SIGHUP (a CI runner's or a terminal's, to the coordinator's group), and leaves no image then. Before it builds it
takes one of the host's build-ahead slots (workers/build_slots.py), and it runs at a lower priority, so that the
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

from bisector.workers.build_ahead import AheadStatus, BuildAheadJob, BuildAheadOutcome
from bisector.workers.build_slots import SLOTS_VARIABLE, slot_count, take_slot
from bisector.workers.images.builder import BuildJob, ImageBuilder, PreparedImage
from bisector.workers.images.cache import ImageCache
from bisector.workers.images.key import ImageRecipe
from bisector.workers.output import StepLog
from bisector.workers.process import CancelSignal

NICENESS = 10  # added to a build's niceness: where CPUs are short, builds that steps wait for go first
DETAIL_CHARS = 500


def cancel_on_end_of_input(cancel: CancelSignal) -> None:
    """Cancel once stdin ends (from a thread: the job's line has been read already)."""

    def watch() -> None:
        while os.read(0, 4096):  # unbuffered: a thread blocked here holds no lock the interpreter's exit needs
            pass
        cancel.set()

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(stop, lambda signum, frame: cancel.set_from_signal_handler())


def lower_priority(pgid: int) -> None:
    """A build started beside a test (on a Ray node, whose actor process cannot be reniced as a whole): its
    process group at NICENESS more than this process."""
    with contextlib.suppress(OSError):  # it ended already, or this user may not
        os.setpriority(os.PRIO_PGRP, pgid, min(os.getpriority(os.PRIO_PROCESS, 0) + NICENESS, 19))


def print_started(pgid: int) -> None:
    """The coordinator's side ends a dead child's build groups by these lines."""
    print(f"started {pgid}", flush=True)


def build(
    job: BuildAheadJob,
    cancel: CancelSignal,
    cache: ImageCache | None = None,
    on_start: Callable[[int], None] = print_started,
) -> BuildAheadOutcome:
    """Make job's image as a step would (reused when it is there already) in cache (default: this host's), then let
    go of it; on_start hears the process group of each command the build starts."""
    recipe = ImageRecipe(job.mode, job.inputs, job.max_bytes, job.artifact)
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
        )  # fmt: skip
        try:
            with ImageBuilder(cache).prepare(build_job) as prepared:
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


def read_job() -> BuildAheadJob:
    """The job's line from stdin, read unbuffered (what follows it, nothing or end of file, is the watcher's)."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            break
        line += chunk
    return BuildAheadJob.from_json(json.loads(line))


def main() -> None:
    job = read_job()
    os.nice(NICENESS)
    cancel = CancelSignal()
    cancel_on_end_of_input(cancel)
    try:
        outcome = build(job, cancel)
    except Exception as exc:  # any failure is this build's, told to the coordinator
        outcome = BuildAheadOutcome(job.sha, AheadStatus.ERROR, detail=f"{type(exc).__name__}: {exc}"[:DETAIL_CHARS])
    print("outcome " + json.dumps(outcome.to_json()), flush=True)


if __name__ == "__main__":
    main()
