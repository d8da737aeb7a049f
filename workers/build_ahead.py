"""Images of the commits a search will likely probe next, built while the current probes' tests run.

A step on an image first builds it (minutes, on CPUs) and only then tests (on its GPUs). While a probe's test runs,
the commits the search would probe after it (one per way it can come out: bad, good) are known, so their images
can be built meanwhile; the next step then finds its image ready, or waits for the build already under way (the
image's lock, workers/images/builder.py), instead of building it from the start with its GPUs idle.

Each build runs in a child process (`python -m workers.build_ahead`, in the coordinator's environment, so it
finds the image cache the workers use) that reads its job as one JSON line on stdin and builds through the same
ImageBuilder as a step, its commands in the environment a step of the commit would see. Its stdin stays open: end
of file (the coordinator closed it, or died) cancels the build, whose process group is then killed and which leaves
no image. A child that dies
itself leaves its build's process group, which the coordinator ends (the pgids the child printed as it started
them). The children print their outcome as one JSON line at the end. Over all the bisects of a host, at most
$BISECT_BUILD_AHEAD_SLOTS images are built ahead at once (workers/build_slots.py); the others wait for a slot.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workers.build_slots import SLOTS_VARIABLE, slot_count, take_slot
from workers.executor import StepRequest

STOP_GRACE_S = 30.0  # a stopped child kills its build (SIGTERM, grace, SIGKILL) and exits within this
PGID_GRACE_S = 5.0  # a dead child's build group: SIGTERM, then SIGKILL after this
NICENESS = 10  # added to a build's niceness: where CPUs are short, builds that steps wait for go first


@dataclass(frozen=True)
class BuildAheadJob:
    """What a child builds: the image a step at sha would prepare (as StepRunner._run_on_image makes its job)."""

    repo: str
    sha: str
    build_cmd: str | None
    mode: str
    inputs: tuple[str, ...]
    max_bytes: int
    artifact: str | None
    env: dict[str, str]
    timeout_s: float
    infra_patterns: tuple[str, ...]
    log_path: str

    @classmethod
    def of(cls, request: StepRequest, base_env: dict[str, str]) -> BuildAheadJob:
        """The job building request's image, in the environment a step of it would see (its GPUs aside)."""
        if request.image is None:
            raise ValueError("only a step on an image (--image venv) can have its image built ahead")
        recipe = request.image
        env = {**base_env, **request.env, "BISECT_SHA": request.sha, "BISECT_STEP_ID": "0", "BISECT_ATTEMPT": "1"}
        return cls(
            request.repo, request.sha, request.build_cmd, recipe.mode, recipe.inputs, recipe.max_bytes,
            recipe.artifact, env, request.timeout_s, request.metric.infra_patterns, request.log_path,
        )  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildAheadJob:
        return cls(**{**data, "inputs": tuple(data["inputs"]), "infra_patterns": tuple(data["infra_patterns"])})


@dataclass(frozen=True)
class BuildAheadOutcome:
    sha: str
    status: str  # ready | reused | failed | cancelled | timed_out | error | died
    build_s: float = 0.0
    detail: str = ""


class _Child:
    def __init__(self, job: BuildAheadJob) -> None:
        self.job = job
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers.build_ahead"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(asdict(job)) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:  # it died at once: nothing of it is left behind
            self.proc.kill()
            self.proc.communicate()
            raise

    def stop(self) -> None:
        """End of file on its stdin: the child cancels its build."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def outcome(self) -> BuildAheadOutcome:
        """Once it exited: what it said, or that it died (then its build's process groups are ended here)."""
        assert self.proc.stdout is not None
        lines = self.proc.stdout.read().decode(errors="replace").splitlines()
        self.proc.stdout.close()
        self.stop()
        said = [line[len("outcome ") :] for line in lines if line.startswith("outcome ")]
        if self.proc.returncode == 0 and said:
            with contextlib.suppress(ValueError, TypeError):
                return BuildAheadOutcome(**json.loads(said[-1]))
        from workers.process_tree import end_groups

        end_groups([int(line.split()[1]) for line in lines if line.startswith("started ")], PGID_GRACE_S)
        return BuildAheadOutcome(self.job.sha, "died", detail=f"the build-ahead process exited {self.proc.returncode}")


class BuildAhead:
    """At most `limit` builds at once, each commit's at most once per bisect; the coordinator's side."""

    def __init__(self, limit: int, base_env: dict[str, str] | None = None) -> None:
        self.limit = limit
        self.base_env = dict(os.environ) if base_env is None else base_env
        self.running: dict[str, _Child] = {}  # sha -> its child
        self.outcomes: dict[str, BuildAheadOutcome] = {}  # sha -> how its build ended

    @property
    def started(self) -> set[str]:
        return set(self.running) | set(self.outcomes)

    def want(self, requests: Sequence[StepRequest], relevant: Collection[str]) -> list[BuildAheadOutcome]:
        """Build the images of requests (best first) not built ahead yet, while fewer than limit run; stop the
        builds of commits not in relevant (the search will not probe them: their images would go unused). Returns
        the outcomes of the builds that ended since the last call."""
        ended = self.reap()
        for sha in [s for s in self.running if s not in relevant]:
            self.running[sha].stop()
        for request in requests:
            if len(self.running) >= self.limit:
                break
            if request.sha not in self.started:
                try:
                    Path(request.log_path).parent.mkdir(parents=True, exist_ok=True)
                    self.running[request.sha] = _Child(BuildAheadJob.of(request, self.base_env))
                except OSError as exc:  # no process or folder to be had now: the step builds its image itself
                    self.outcomes[request.sha] = BuildAheadOutcome(request.sha, "error", detail=str(exc))
        return ended

    def reap(self) -> list[BuildAheadOutcome]:
        """The outcomes of the builds that ended since the last call."""
        ended = [sha for sha, child in self.running.items() if child.proc.poll() is not None]
        out = []
        for sha in ended:
            outcome = self.running.pop(sha).outcome()
            self.outcomes[sha] = outcome
            out.append(outcome)
        return out

    def close(self) -> list[BuildAheadOutcome]:
        """Stop every build still running and wait for its child (which kills the build first). Returns the
        outcomes of the builds that ended since the last call."""
        for child in self.running.values():
            child.stop()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.running.values():
            try:
                child.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
        return self.reap()


def _stdin_closed() -> bool:
    """Whether the coordinator closed our stdin (or died): then the build is cancelled."""
    readable, _, _ = select.select([0], [], [], 0)
    return bool(readable) and os.read(0, 1) == b""


def build(job: BuildAheadJob) -> BuildAheadOutcome:
    """Make job's image as a step would (reused when it is there already), then let go of it."""
    from workers.images.builder import BuildJob, ImageBuilder
    from workers.images.key import ImageRecipe
    from workers.output import StepLog

    recipe = ImageRecipe(job.mode, job.inputs, job.max_bytes, job.artifact)
    log_path = Path(job.log_path)
    with log_path.open("ab", buffering=0) as log_file:
        log = StepLog(log_file)
        log.note(f"# building the image of {job.sha[:12]} ahead of its step (pid {os.getpid()})\n")

        def waiting() -> None:
            log.note(f"# every build-ahead slot of this host is taken (${SLOTS_VARIABLE}={slot_count()}): waiting\n")

        slot = take_slot(_stdin_closed, waiting)
        if slot is None:
            return BuildAheadOutcome(job.sha, "cancelled")

        def started(pgid: int) -> None:
            print(f"started {pgid}", flush=True)

        build_job = BuildJob(
            job.repo, job.sha, job.build_cmd, recipe, job.env, log, job.timeout_s, should_cancel=_stdin_closed,
            on_start=started, cancel_fd=0, infra_patterns=job.infra_patterns,
        )  # fmt: skip
        try:
            with ImageBuilder().prepare(build_job) as prepared:
                info = prepared.info
                build_s = info.build_s if info is not None and not info.reused else 0.0
                if prepared.ready:
                    status = "reused" if info is not None and info.reused else "ready"
                    return BuildAheadOutcome(job.sha, status, build_s)
                if prepared.cancelled:
                    return BuildAheadOutcome(job.sha, "cancelled")
                if prepared.timed_out:
                    return BuildAheadOutcome(job.sha, "timed_out")
                if prepared.failed_build:
                    return BuildAheadOutcome(job.sha, "failed", build_s, prepared.failed_build[-500:])
                return BuildAheadOutcome(job.sha, "error", build_s, prepared.error[-500:])
        finally:
            os.close(slot)
            log.finish()


def main() -> None:
    job = BuildAheadJob.from_json(json.loads(sys.stdin.buffer.readline()))
    os.nice(NICENESS)  # a build no step waits for yet gives way to those that steps wait for
    try:
        outcome = build(job)
    except Exception as exc:  # any failure is this build's, told to the coordinator
        outcome = BuildAheadOutcome(job.sha, "error", detail=f"{type(exc).__name__}: {exc}"[:500])
    print("outcome " + json.dumps(asdict(outcome)), flush=True)


if __name__ == "__main__":
    main()
