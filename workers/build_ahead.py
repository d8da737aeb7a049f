"""Images of the commits a search will likely probe next, built while the current probes' tests run.

A step on an image first builds it (minutes, on CPUs) and only then tests (on its GPUs). While a round of probes
runs, the commits the search would probe next (a round for each way the running one can come out) are known, so
their images can be built meanwhile; the next step then finds its image ready, or waits for the build already
under way (the image's lock, workers/images/builder.py), instead of building it from the start with its GPUs idle.

The builds of one bisect run in one child process of its own session (workers/build_ahead_child.py, in the
coordinator's environment, so it finds the image cache the workers use), each in a thread, its commands sent as
JSON lines on the child's stdin. Its stdin stays open: end of file (the coordinator closed it, or died) cancels
every build, which leaves no image. A child that dies, or keeps a stopped build past STOP_GRACE_S, is ended here
with its session and the process groups and cgroups its builds made (each printed with its leader's start time as
it started), as a dead worker's steps are; its builds count as died.
"""

from __future__ import annotations

import abc
import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

from bisector.vocab.domain import ImageInfo
from bisector.vocab.patches import Patch
from bisector.vocab.processes import ProcessGroup, ended_how, process_start
from bisector.workers.build_slots import slot_count
from bisector.workers.cgroups import end_dead_worker
from bisector.workers.step_request import StepRequest, image_build_environment, step_environment

STOP_GRACE_S = 30.0  # a stopped child kills its build (SIGTERM, grace, SIGKILL) and exits within this
PGID_GRACE_S = 5.0  # a dead child's build groups: SIGTERM, then SIGKILL after this
ORDERS_PIPE_BYTES = 1 << 20  # the child's stdin: a pass of dozens of orders (about 1 KB each) without a wait
BUILD_WORKER = "build-ahead"  # $BISECT_WORKER of a build ahead (a step's is its worker slot's name)


BuildT = TypeVar("BuildT")  # what a builder keeps of a running build


class AheadStatus(StrEnum):
    READY = "ready"  # built now
    REUSED = "reused"  # it was there already (a step or another bisect made it)
    FAILED = "failed"  # the build failed: nothing kept, the step builds it again (and judges the commit)
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    ERROR = "error"  # the harness could not build it (no process, no folder)
    DIED = "died"  # the child died or would not stop


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
    patches: tuple[Patch, ...] = ()  # applied to the tree before its build, as a step's image has them
    recipe_env: tuple[tuple[str, str], ...] = ()  # the spec's env, which keys the image as a step's recipe does

    @classmethod
    def of(cls, request: StepRequest, base_env: dict[str, str]) -> BuildAheadJob:
        """The job building request's image, in the environment a step of it would see, with the GPUs a step's own
        build of it would see (image_build_environment)."""
        if request.image is None:
            raise ValueError("only a step on an image (--image venv) can have its image built ahead")
        recipe = request.image
        env = image_build_environment(request, step_environment(request, (), base_env, BUILD_WORKER))
        return cls(
            request.repo, request.sha, request.build_cmd, recipe.mode, recipe.inputs, recipe.max_bytes,
            recipe.artifact, env, request.timeout_s, request.metric.infra_patterns, request.log_path, recipe.patches,
            recipe.env,
        )  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildAheadJob:
        return cls(**{
            **data, "inputs": tuple(data["inputs"]), "infra_patterns": tuple(data["infra_patterns"]),
            "patches": tuple(Patch.from_json(patch) for patch in data.get("patches", ())),
            "recipe_env": tuple((str(name), str(value)) for name, value in data.get("recipe_env", ())),
        })  # fmt: skip


@dataclass(frozen=True)
class BuildAheadOutcome:
    sha: str
    status: AheadStatus
    build_s: float = 0.0
    detail: str = ""
    image: ImageInfo | None = None  # the image made (READY), for the store's images table

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "status": self.status.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildAheadOutcome:
        made = data.get("image")
        image = ImageInfo(**{**made, "evicted": tuple(made["evicted"])}) if isinstance(made, dict) else None
        return cls(str(data["sha"]), AheadStatus(data["status"]), float(data["build_s"]), str(data["detail"]), image)


def env_changes(env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str | None]:
    """What turns base into env: the variables env sets differently, and None for those it lacks."""
    return {**{name: value for name, value in env.items() if base.get(name) != value},
            **{name: None for name in base if name not in env}}  # fmt: skip


def with_changes(base: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """base with env_changes' changes made."""
    return {name: value for name, value in {**base, **changes}.items() if value is not None}


class AheadBuilder(abc.ABC, Generic[BuildT]):
    """Builds images ahead of their steps where the executor's steps build them (Executor.ahead_builder): on this
    host (BuildAhead) or on Ray nodes (workers/ray_build_ahead.py); the search loop drives it. The `limit`
    likeliest next probes are wanted; at most `at_once` of them build at once (the host's build slots), likeliest
    first; each commit's at most once per bisect."""

    def __init__(self, limit: int, at_once: int | None = None) -> None:
        self.limit = limit
        self.at_once = limit if at_once is None else max(1, min(limit, at_once))
        self.running: dict[str, BuildT] = {}  # sha -> its build, while it runs
        self.outcomes: dict[str, BuildAheadOutcome] = {}  # sha -> how its build ended

    def want(self, requests: Sequence[StepRequest], relevant: Callable[[str], bool]) -> list[BuildAheadOutcome]:
        """Build the images of requests (best first) not built ahead yet, while fewer than at_once run; stop the
        builds of commits relevant() no longer holds (the search will not probe them: their images would go
        unused). Returns the outcomes of the builds that ended since the last call."""
        ended = self.reap()
        for sha in self.running:
            if not relevant(sha):
                self.stop(sha)
        for request in requests:
            if len(self.running) >= self.at_once:
                break
            if request.sha in self.running or request.sha in self.outcomes or not relevant(request.sha):
                continue
            if not self.start(request):
                break  # nowhere to build now: the next pass tries again
        return ended

    @abc.abstractmethod
    def start(self, request: StepRequest) -> bool:
        """Start request's build (in running; or, where none can start, its outcome in outcomes); False: there is
        nowhere to build it now."""

    @abc.abstractmethod
    def stop(self, sha: str) -> None:
        """Ask sha's running build to end; it leaves no image, and its outcome comes from a later reap()."""

    @abc.abstractmethod
    def reap(self) -> list[BuildAheadOutcome]:
        """The outcomes of the builds that ended since the last call."""

    @abc.abstractmethod
    def close(self) -> list[BuildAheadOutcome]:
        """Stop every build still running and wait for them; the outcomes since the last call."""


@dataclass
class _Build:
    job: BuildAheadJob
    proc: subprocess.Popen[bytes]  # the bisect's build-ahead process, which runs it
    groups: list[ProcessGroup] = field(default_factory=list)  # the process groups of its commands
    stopped_at: float | None = None


class BuildAhead(AheadBuilder[_Build]):
    """Builds ahead on this host, in one child process (threads), as many at once as the host has build slots
    (a build started beyond them would only wait for one); the coordinator's side."""

    def __init__(self, limit: int, base_env: dict[str, str] | None = None) -> None:
        super().__init__(limit, slot_count())
        self.base_env = dict(os.environ) if base_env is None else base_env
        self.proc: subprocess.Popen[bytes] | None = None
        self.session: list[ProcessGroup] = []  # the live child's own process group (its git commands run in it)
        self.unread = b""  # the child's output after its last whole line
        self.unreported: list[BuildAheadOutcome] = []  # reaped while a dead child was replaced: the next reap's
        self.orders: list[bytes] = []  # for the live child, not sent yet

    def want(self, requests: Sequence[StepRequest], relevant: Callable[[str], bool]) -> list[BuildAheadOutcome]:
        try:
            return super().want(requests, relevant)
        finally:
            self._send()  # the pass's orders in one write: the child starts its builds together

    def start(self, request: StepRequest) -> bool:
        try:
            Path(request.log_path).parent.mkdir(parents=True, exist_ok=True)
            job = BuildAheadJob.of(request, self.base_env)
            proc = self._child()
            order = {**asdict(job), "env": env_changes(job.env, self.base_env)}  # the child's own env is base_env
            self._tell({"build": {**order, "patches": [patch.to_json() for patch in job.patches]}})
            self.running[request.sha] = _Build(job, proc)
        except OSError as exc:  # no process or folder to be had now: the step builds its image itself
            self.outcomes[request.sha] = BuildAheadOutcome(request.sha, AheadStatus.ERROR, detail=str(exc))
        return True

    def _child(self) -> subprocess.Popen[bytes]:
        """The live child, started now where there is none (or it died: its builds are reaped as died)."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.unreported += self.reap()  # the dead one's builds, before its output is left behind
                self._let_go(self.proc)
                self.orders = []  # they were the dead one's
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bisector.workers.build_ahead_child"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,  # its builds go with it
                env=self.base_env,
            )  # fmt: skip
            started = process_start(self.proc.pid)
            self.session = [ProcessGroup(self.proc.pid, started)] if started is not None else []
            assert self.proc.stdin is not None
            assert self.proc.stdout is not None
            with contextlib.suppress(OSError, AttributeError):  # Linux: a pass's orders fit, and go in one read
                fcntl.fcntl(self.proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, ORDERS_PIPE_BYTES)
            os.set_blocking(self.proc.stdout.fileno(), False)
            self.unread = b""
        return self.proc

    def _tell(self, order: dict[str, object]) -> None:
        """Queue an order for the live child; _send writes the queue."""
        self.orders.append(json.dumps(order).encode() + b"\n")

    def _send(self) -> None:
        orders, self.orders = b"".join(self.orders), []
        if orders and self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # it died: its builds are reaped as died
                self.proc.stdin.write(orders)
                self.proc.stdin.flush()

    def stop(self, sha: str) -> None:
        running = self.running[sha]
        if running.stopped_at is None:
            running.stopped_at = time.monotonic()
            self._tell({"stop": sha})

    def reap(self) -> list[BuildAheadOutcome]:
        """The outcomes of the builds that ended since the last call. A child that died, or holds a build stopped
        STOP_GRACE_S ago, is ended with what its builds started; its builds without an outcome died."""
        earlier, self.unreported = self.unreported, []
        if self.proc is None:
            return earlier
        proc, now = self.proc, time.monotonic()
        stuck = any(r.stopped_at is not None and now - r.stopped_at > STOP_GRACE_S for r in self.running.values())
        if stuck and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        exited = proc.poll() is not None  # before its last output is read: nothing comes after
        out = [self._ended(o) for o in self._read_outcomes(proc) if o.sha in self.running]
        dead = [sha for sha, r in self.running.items() if r.proc is proc] if exited else []
        if dead:
            groups = [*self.session, *(g for sha in dead for g in self.running[sha].groups)]
            end_dead_worker(proc.pid, groups, PGID_GRACE_S)
            detail = f"the build-ahead process {ended_how(proc.returncode)}"
            out += [self._ended(BuildAheadOutcome(sha, AheadStatus.DIED, detail=detail)) for sha in dead]
        return earlier + out

    def _ended(self, outcome: BuildAheadOutcome) -> BuildAheadOutcome:
        del self.running[outcome.sha]
        self.outcomes[outcome.sha] = outcome
        return outcome

    def _read_outcomes(self, proc: subprocess.Popen[bytes]) -> list[BuildAheadOutcome]:
        """The outcomes the child printed since the last read (the process groups it printed go to their builds)."""
        assert proc.stdout is not None
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(proc.stdout.fileno(), 65536):
                self.unread += chunk
        *lines, self.unread = self.unread.split(b"\n")
        outcomes = []
        for line in lines:
            kind, _, rest = line.decode(errors="replace").partition(" ")
            with contextlib.suppress(ValueError, TypeError, KeyError):
                if kind == "started":
                    sha, pgid, started = rest.split()
                    if sha in self.running and started != "None":  # a leader gone before it was read: not told apart
                        self.running[sha].groups.append(ProcessGroup(int(pgid), started))
                elif kind == "outcome":
                    outcomes.append(BuildAheadOutcome.from_json(json.loads(rest)))
        return outcomes

    def close(self) -> list[BuildAheadOutcome]:
        """Stop every build still running and wait for the child (which ends its builds first), reading the outcomes
        it prints meanwhile; the outcomes of the builds that ended since the last call."""
        proc = self.proc
        if proc is None:
            return []
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # end of file: every build is cancelled
        stdout = proc.stdout
        assert stdout is not None
        ended: list[BuildAheadOutcome] = []
        deadline = time.monotonic() + STOP_GRACE_S
        while proc.poll() is None and (left_s := deadline - time.monotonic()) > 0:
            select.select([stdout], [], [], left_s)  # a child blocked printing an outcome cannot exit: read it
            ended += self.reap()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        ended += self.reap()
        self._let_go(proc)
        self.proc = None
        return ended

    @staticmethod
    def _let_go(proc: subprocess.Popen[bytes]) -> None:
        """Close the pipes of a child that has exited."""
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
