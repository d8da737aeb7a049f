"""Domain objects shared by the coordinator, the executors and the store.

Rows become these objects at the store's edge (db/store.py); nothing else speaks SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class Verdict(StrEnum):
    GOOD = "good"  # the metric meets the expectation (or exit code 0)
    BAD = "bad"  # the metric violates it (or exit code 1..127, 125 excepted)
    SKIP = "skip"  # cannot be tested here: build failed, exit 125, no metric printed
    ERROR = "error"  # infrastructure: timeout, signal, lost worker, known infra signature
    CANCELLED = "cancelled"  # made irrelevant by other results while it ran
    MEASURED = "measured"  # a metric sample judged later against the endpoints' samples (--expect auto)

    @property
    def decides(self) -> bool:
        """Whether this verdict narrows the search (only good and bad do)."""
        return self in (Verdict.GOOD, Verdict.BAD)


class BisectStatus(StrEnum):
    RUNNING = "running"  # created; the coordinator is (or was, if it died) working on it
    FOUND = "found"  # exactly one first bad commit named
    AMBIGUOUS = "ambiguous"  # skipped commits beside the boundary: a range is named, not a commit
    ENDPOINTS_MISMATCH = "endpoints_mismatch"  # good endpoint tested bad, or bad endpoint good
    FAILED = "failed"  # could not finish: endpoints untestable, retries exhausted at an endpoint
    CANCELLED = "cancelled"  # stopped by `bisect cancel`
    NOT_REPRODUCIBLE = "not_reproducible"  # confirmation found no reproducible difference: flaky, not a culprit
    PAUSED = "paused"  # the harness kept failing (disk full, broken slots): a resume continues once it is fixed

    def is_terminal(self) -> bool:
        return self not in (BisectStatus.RUNNING, BisectStatus.PAUSED)


class ErrorKind(StrEnum):
    TIMEOUT = "timeout"  # the step ran past its timeout; its process group was killed
    SIGNAL = "signal"  # the test died from a signal or exited above 127
    WORKER_LOST = "worker_lost"  # the worker process / actor / node disappeared mid-step
    INFRA = "infra"  # a known infrastructure signature in the log (OOM, connection refused, ...)
    HARNESS = "harness"  # the step runner itself failed (checkout failed, a broken slot, ...): not the commit's fault
    DISK_FULL = "disk_full"  # no space left for the step's log, worktree or build: not the commit's fault
    STALLED = "stalled"  # the step never reported within its deadline: the coordinator's watchdog gave up on it
    INTERRUPTED = "interrupted"  # the coordinator died while the step ran; found on resume


class StepPurpose(StrEnum):
    SEARCH = "search"  # a probe of the search (endpoints included): its verdict narrows the range
    TRACE = "trace"  # a traced re-run of last good / first bad for the explanation
    MINIMIZE = "minimize"  # a variant of the culprit with a subset of its changes (ddmin)
    CONFIRM = "confirm"  # a re-run of first bad and its parent to confirm the boundary
    REFERENCE = "reference"  # a known commit re-run on a suspect worker
    RERUN = "rerun"  # `bisect run-at --bisect`: the bisect's test at any commit, on demand
    MANUAL = "manual"  # a person's verdict (`bisect mark`, `bisect replay`): no test ran
    PROBE = "probe"  # --prune auto: the test at the bad commit under coverage, before the search


@dataclass(frozen=True)
class Commit:
    """One commit of the bisect range. position 0 is the good endpoint, the last one the bad endpoint. Its details
    (subject, author, date, PR) are read from git for the commits a bisect shows (vocab/commit_range.py): a commit
    not described has date None."""

    position: int
    sha: str
    subject: str = ""
    author: str = ""
    date: datetime | None = None  # the author date, the one `git log` shows
    pr: int | None = None

    @property
    def described(self) -> bool:
        return self.date is not None


_PR_PATTERNS = (re.compile(r"\(#(\d+)\)\s*$"), re.compile(r"^Merge pull request #(\d+)\b"))


def parse_pr_number(subject: str) -> int | None:
    """The PR number of a subject like 'Fix x (#47683)' or 'Merge pull request #12 from ...'."""
    for pattern in _PR_PATTERNS:
        match = pattern.search(subject)
        if match:
            return int(match.group(1))
    return None


@dataclass(frozen=True)
class ImageInfo:
    """The worker image a step ran on (workers/images): which, where from, and whether this step built it."""

    id: str
    source: str  # built (by this step) | cache (built before, on this node) | artifact (a prebuilt one) |
    # missing (no container image, and no Containerfile at the commit to build one: the step skips)
    reused: bool  # no build happened for this step
    build_s: float  # seconds the image's build took (when it was built, whichever step built it)
    status: str = "ready"  # ready | failed (its build failed: the step skipped)
    sha: str = ""  # the commit the image was built at (another commit with the same key reuses it)
    path: str = ""
    node: str = ""
    size_bytes: int = 0
    key: dict[str, object] = field(default_factory=dict)
    created: str = ""  # ISO 8601, UTC
    last_used: str = ""
    log_tail: str = ""  # a failed build's output's end
    evicted: tuple[str, ...] = ()  # images the LRU cap removed on this node to make room for this one
    made_as: str = ""  # how the image on its node was made (built | artifact | copied), whichever step made it
    replaced: str = ""  # how the damaged image it was made in place of differed from its record ("" when none)

    def summary(self) -> dict[str, object]:
        """What a step's JSON shows of its image (what it replaced only where this step made it)."""
        summary: dict[str, object] = {
            "id": self.id, "source": self.source, "reused": self.reused, "build_s": round(self.build_s, 3),
            "status": self.status,
        }  # fmt: skip
        if self.replaced and not self.reused:
            summary["replaced"] = self.replaced
        return summary


def image_origin(image: Mapping[str, object]) -> str:
    """Where a step's image came from, from its ImageInfo.summary(): built, cache, artifact, copied (from another
    node), missing; `rebuilt (damaged)` for one this step made in place of a damaged one; `build failed` for one
    whose build failed (by this step or an earlier one: either way the step did not run on it)."""
    if image.get("status") == "failed":
        return "build failed"
    if image.get("replaced"):
        return "rebuilt (damaged)"
    return str(image.get("source", ""))


# A stopped step's detail as stored: a worker knows only that it stopped a step when asked (CANCELLED_DETAIL); the
# coordinator stores why (bisector/runner/pipeline.py), and the report reads it back.
CANCELLED_DETAIL = "cancelled"
NOT_NEEDED = "no longer needed"  # the search stopped it: its result could no longer matter
NEVER_SENT = "never sent to a worker"  # recorded, then the coordinator stopped before sending it
# What a stored pause or full disk advises, in words every face reads (each adds its own way to resume: a command,
# a button, a JSON key; bisector/report/resume.py).
PAUSE_ADVICE = "fix it, then resume the bisect"
DISK_FULL_ADVICE = "free space, then resume the bisect"
# how long a cancel waits for the reruns it revoked to end (they look every half second); the most a server waits
RERUN_STOP_WAIT_S = 60.0


@dataclass(frozen=True)
class StepResult:
    """What a worker reports for one step; the coordinator alone writes it to the store."""

    step_id: int
    sha: str
    verdict: Verdict
    samples: tuple[float, ...] = ()
    exit_code: int | None = None
    build_s: float = 0.0
    run_s: float = 0.0
    error_kind: ErrorKind | None = None
    detail: str = ""  # why: the skip reason, the infra signature, the log tail of a failure
    log_path: str = ""
    worker: str = ""
    node: str = ""
    gpus: tuple[int, ...] = ()
    image: ImageInfo | None = None  # the worker image it ran on, when the spec asks for images


@dataclass(frozen=True)
class StepRecord:
    """A stored step: one attempt at testing one commit. verdict is None while it runs."""

    id: int
    bisect_id: int
    sha: str
    attempt: int
    worker: str
    node: str
    gpus: tuple[int, ...]
    started: datetime
    finished: datetime | None
    build_s: float | None
    run_s: float | None
    exit_code: int | None
    verdict: Verdict | None
    samples: tuple[float, ...]
    log_path: str
    error_kind: ErrorKind | None
    detail: str
    purpose: StepPurpose = StepPurpose.SEARCH
    image: dict[str, object] | None = None  # ImageInfo.summary() of the image it ran on

    @property
    def metric(self) -> float | None:
        return self.samples[-1] if self.samples else None


@dataclass(frozen=True)
class BisectRecord:
    """A stored bisect. spec is the BisectSpec as JSON-able dict (bisector/core/spec.py)."""

    id: int
    repo: str
    good: str
    bad: str
    spec: dict[str, object]
    status: BisectStatus
    created: datetime
    finished: datetime | None
    first_bad: str | None
    last_good: str | None
    message: str = ""
    extra: dict[str, object] = field(default_factory=dict)
    owner: str | None = None  # the coordinator holding the bisect's lease (host:pid:start), None when none does
    heartbeat: datetime | None = None  # when that coordinator last renewed its lease
    lease_ttl_s: float | None = None  # that coordinator's TTL: gone once this passes without a heartbeat


@dataclass(frozen=True)
class SideRun:
    """A run of the bisect's build and test outside its search: a rerun, a traced re-run, a minimisation variant."""

    sha: str
    purpose: StepPurpose
    env: dict[str, str] = field(default_factory=dict)  # added to the spec's env
    label: str = ""  # shown in the log file name, e.g. "first-bad"
