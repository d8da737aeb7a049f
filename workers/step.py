"""StepRunner: test one commit on one worker slot — check out, build, run, judge.

Runs on the worker (a local worker process, a Ray actor, or in-process for tests). It never writes
to the store: it returns a StepResult and the coordinator records it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bisector.vocab.domain import CANCELLED_DETAIL, DISK_FULL_ADVICE, ErrorKind, ImageInfo, StepResult, Verdict
from bisector.vocab.errors import RepoError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.metric import DISK_FULL_SIGNATURE, judge_run
from bisector.vocab.patches import PatchError, patched_tree
from bisector.workers.build_outcome import BuildEnd, BuildOutcome, judge_build
from bisector.workers.container import run_in_container
from bisector.workers.image_test import ImageTest, ImageTestHost
from bisector.workers.images.builder import BuildJob, ImageBuilder, PreparedImage
from bisector.workers.images.cache import ImageCache
from bisector.workers.images.key import ImageRecipe
from bisector.workers.images.run_copy import private_copy
from bisector.workers.images.transfer import ImagePeer
from bisector.workers.output import DETAIL_TAIL_BYTES, StepLog
from bisector.workers.process import run_shell
from bisector.workers.step_context import StepContext
from bisector.workers.step_request import StepRequest, image_build_environment, step_environment

NEARLY_FULL_BYTES = 64 << 10  # a harness failure on a filesystem with less free space than this is a full disk
METRIC_MIN_TIME_S = 1.0  # the least time judging a run's output gets, even when the run used up the step's timeout


@dataclass(frozen=True)
class WorkerSlot:
    name: str
    gpus: tuple[int, ...]
    worktree: Path
    node: str = socket.gethostname()


class StepRunner:
    def __init__(
        self,
        slot: WorkerSlot,
        clean_for: str | None = None,
        opened: Sequence[GitRepo] = (),
        image_root: Path | None = None,
        image_host: ImageTestHost | None = None,
    ) -> None:
        """clean_for: the repo for which the slot's worktree is known to hold no untracked files (just made or
        cleaned by the caller), so the first step needs only a checkout. opened: repositories the caller has
        opened already (with their worktree handles), so the first step does not pay for opening them.
        image_root: the image cache root (default: images_root() of this process's environment).
        image_host: runs a step's test inside its venv image's interpreter (Ray); without one, or when it cannot,
        the test runs from this process with the image's environment."""
        self.slot = slot
        self._image_root = image_root
        self._image_host = image_host
        self._opened = list(opened)
        self._repos: dict[str, GitRepo] = {}
        self._tidy_repo = clean_for  # the repo whose worktree is clean now, if known

    def tidy(self, request: StepRequest) -> None:
        """Remove what the step just run left in the worktree, so the next step needs only a checkout.

        A worker calls this after it has sent the step's result, while the coordinator picks the next step;
        if it fails or is not called, the next run() cleans before its checkout instead.
        """
        self._tidy_repo = None
        with contextlib.suppress(OSError, RepoError):
            self._repo(request.repo).clean_worktree(self.slot.worktree)
            self._tidy_repo = request.repo

    def _repo(self, path: str) -> GitRepo:
        if path not in self._repos:
            root = Path(path).resolve()
            self._repos[path] = next((r for r in self._opened if r.root == root), None) or GitRepo(path)
        return self._repos[path]

    def run(
        self,
        request: StepRequest,
        should_cancel: Callable[[], bool] = lambda: False,
        on_start: Callable[[int], None] = lambda pgid: None,
        cancel_fd: int | None = None,
        image_peer: ImagePeer | None = None,
    ) -> StepResult:
        """cancel_fd: a CancelSignal's, so that a cancel stops the running command at once (run_shell). image_peer:
        a node that may hold the step's image (copied from there rather than built here).

        A failure of the harness (the slot's worktree cannot be made, the log cannot be written) comes back as an
        error of kind HARNESS, or DISK_FULL when the disk is full, never as a verdict on the commit."""
        log_path = Path(request.log_path)
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            clean = self._tidy_repo != request.repo
            self._tidy_repo = None
            if request.image is None:  # an image holds the commit's tree itself
                self._repo(request.repo).ensure_worktree(self.slot.worktree, request.sha, clean=clean)
        except (OSError, RepoError) as exc:
            where = self.slot.worktree
            return self._harness_failed(request, exc, f"checking out {request.sha[:12]} in {where}", where)
        env = step_environment(request, self.slot.gpus, dict(os.environ), self.slot.name)
        try:
            log_path.unlink(missing_ok=True)
            # Unbuffered, append mode: our lines and the commands' output interleave in order, and a full disk
            # shows at the write that hit it, not at close.
            log_file = log_path.open("ab", buffering=0)
        except OSError as exc:
            return self._harness_failed(request, exc, f"opening the step log {log_path}", log_path)
        started = time.monotonic()  # the step's timeout covers its build and run
        with log_file:
            step = StepContext(
                request, StepLog(log_file), env, self.slot.worktree, self.slot.gpus, started,
                should_cancel, on_start, cancel_fd, image_peer,
            )  # fmt: skip
            try:
                return self._build_and_run(step)
            finally:
                step.log.finish()

    def _build_and_run(self, step: StepContext) -> StepResult:
        request, log = step.request, step.log
        log.note(self._header(request))
        if log.error is not None:  # nothing started: no test runs with nowhere to log
            return self._log_failed(request, log.error)
        if request.patches and (unpatched := self._apply_patches(step)) is not None:
            return unpatched
        if request.container is not None:
            return run_in_container(self, step, ImageCache(self._image_root))
        if request.image is not None:
            return self._run_on_image(step, request.image)
        build_s = 0.0
        if request.build_cmd:
            log.note(f"$ {request.build_cmd}\n")
            process = run_shell(
                request.build_cmd, step.workdir, step.env, log, step.time_left_s(),
                should_cancel=step.should_cancel, on_start=step.on_start, cancel_fd=step.cancel_fd,
            )  # fmt: skip
            time_limit_s = max(step.time_left_s(), METRIC_MIN_TIME_S)
            build = judge_build(process, "build", request.metric.infra_patterns, time_limit_s)
            build_s = build.build_s
            if build.end is not BuildEnd.SUCCEEDED:
                return self._build_failed(request, build)
        return self.run_test(step, build_s, None)

    def _apply_patches(self, step: StepContext) -> StepResult | None:
        """Apply the request's patches on its commit, in the worktree: None once applied, else the result: a skip
        where one does not apply."""
        request, log = step.request, step.log
        repo = self._repo(request.repo)
        try:
            repo.check_out_tree(step.workdir, patched_tree(repo, request.sha, request.patches))
        except PatchError as exc:
            if _is_disk_full(exc):
                return self._harness_failed(request, exc, "applying the patches", step.workdir)
            log.note(f"# {exc}\n")
            return self.result(request, Verdict.SKIP, detail=str(exc))
        except RepoError as exc:
            return self._harness_failed(request, exc, "applying the patches", step.workdir)
        log.note("".join(f"# applied {patch.label}\n" for patch in request.patches))
        return None

    def _run_on_image(self, step: StepContext, recipe: ImageRecipe) -> StepResult:
        """Prepare or reuse the commit's image (workers/images), then run the test in it with its environment."""
        request, log = step.request, step.log
        build_env = image_build_environment(request, step.env)  # the test still sees its slot's GPUs alone
        job = BuildJob(
            request.repo, request.sha, request.build_cmd, recipe, build_env, log, step.time_left_s(),
            should_cancel=step.should_cancel, on_start=step.on_start, cancel_fd=step.cancel_fd,
            infra_patterns=request.metric.infra_patterns, peer=step.image_peer, opened=self._repo(request.repo),
        )  # fmt: skip
        asked = time.monotonic()
        with ImageBuilder(ImageCache(self._image_root)).prepare(job) as prepared, contextlib.ExitStack() as stack:
            info = prepared.info
            # a reused image counts the time waited for it (another step's build, a build ahead), not its build's
            build_s = info.build_s if info is not None and not info.reused else time.monotonic() - asked
            if log.error is not None:
                return self._log_failed(request, log.error)
            if prepared.run_dir is None:
                return self._image_failed(request, prepared, build_s)
            try:  # the test's own copy of tree and venv: what it writes never reaches the image later steps run on
                run = stack.enter_context(private_copy(prepared))
            except OSError as exc:
                return self._harness_failed(request, exc, "copying the image for the test", prepared.run_dir)
            run_dir = run.tree
            if request.metric.json_file:  # a file of that name the build left is not this run's metric
                with contextlib.suppress(OSError):
                    (run_dir / request.metric.json_file).unlink()
            image_env = {**step.env, **run.env}
            python = run.env.get("BISECT_IMAGE_PYTHON")
            if self._image_host is not None and python:
                log.finish()  # the build's part of the log is complete before another process appends to it
                test = ImageTest(request, image_env, run_dir, python, step.started, build_s, info)
                hosted = self._image_host(test, log, step.should_cancel)
                if hosted is not None:
                    return hosted
            return self.run_test(step.moved(run_dir, image_env), build_s, info)

    def run_image_test(
        self,
        test: ImageTest,
        should_cancel: Callable[[], bool] = lambda: False,
        on_start: Callable[[int], None] = lambda pgid: None,
        cancel_fd: int | None = None,
    ) -> StepResult:
        """Run a test whose image another step runner holds (an ImageTestHost's side), appending to the step's log."""
        log_path = Path(test.request.log_path)
        try:
            log_file = log_path.open("ab", buffering=0)
        except OSError as exc:
            return self._harness_failed(test.request, exc, f"opening the step log {log_path}", log_path)
        with log_file:
            step = StepContext(
                test.request, StepLog(log_file), test.env, test.run_dir, self.slot.gpus, test.started,
                should_cancel, on_start, cancel_fd,
            )  # fmt: skip
            step.log.note(f"# runner {sys.executable} (pid {os.getpid()})\n")
            try:
                return self.run_test(step, test.build_s, test.image)
            finally:
                step.log.finish()

    def _image_failed(self, request: StepRequest, prepared: PreparedImage, build_s: float) -> StepResult:
        if prepared.cancelled:
            return self.result(request, Verdict.CANCELLED, build_s=build_s, detail=CANCELLED_DETAIL)
        if prepared.timed_out:
            kind, detail = ErrorKind.TIMEOUT, "image build timed out"
            return self.result(request, Verdict.ERROR, build_s=build_s, error_kind=kind, detail=detail)
        if prepared.failed_build:
            return self.result(
                request, Verdict.SKIP, exit_code=prepared.exit_code, build_s=build_s,
                detail=prepared.failed_build, image=prepared.info,
            )  # fmt: skip
        kind = prepared.error_kind or (ErrorKind.SIGNAL if prepared.exit_code is not None else ErrorKind.HARNESS)
        return self.result(request, Verdict.ERROR, exit_code=prepared.exit_code, error_kind=kind, detail=prepared.error)

    def run_test(
        self, step: StepContext, build_s: float, image: ImageInfo | None, command: str | None = None
    ) -> StepResult:
        """Run the test (command: the one that runs it, e.g. in a container) in the step's workdir and judge its
        output there."""
        request, log, cwd = step.request, step.log, step.workdir
        log.note(f"$ {command or request.run_cmd}\n")
        timeout_s = step.command_timeout_s()
        scan = request.metric.scan(max(timeout_s, METRIC_MIN_TIME_S))
        run = run_shell(
            command or request.run_cmd, cwd, step.env, log, timeout_s,
            should_cancel=step.should_cancel, on_start=step.on_start, cancel_fd=step.cancel_fd, metric_scan=scan,
        )  # fmt: skip
        if log.error is not None:
            return self._log_failed(request, log.error)
        if run.cancelled:
            done = {"build_s": build_s, "run_s": run.elapsed_s, "image": image}
            return self.result(request, Verdict.CANCELLED, detail=CANCELLED_DETAIL, **done)
        judgement = judge_run(
            request.metric, run.exit_code, run.output.text(), cwd, timed_out=run.timed_out,
            time_limit_s=max(step.time_left_s(), METRIC_MIN_TIME_S), scan=scan,
        )  # fmt: skip
        detail = judgement.detail
        if judgement.verdict in (Verdict.SKIP, Verdict.ERROR) or (not judgement.samples and run.exit_code != 0):
            detail = f"{detail}\n{run.output.tail()}".strip()
        return self.result(
            request, judgement.verdict, samples=judgement.samples, exit_code=run.exit_code,
            build_s=build_s, run_s=run.elapsed_s, error_kind=judgement.error_kind, detail=detail, image=image,
        )  # fmt: skip

    def _build_failed(self, request: StepRequest, build: BuildOutcome) -> StepResult:
        if build.process.log_error is not None:
            return self._log_failed(request, build.process.log_error)
        if build.end is BuildEnd.CANCELLED:
            return self.result(request, Verdict.CANCELLED, build_s=build.build_s, detail=build.why)
        verdict = Verdict.SKIP if build.end is BuildEnd.FAILED else Verdict.ERROR
        return self.result(
            request, verdict, exit_code=build.exit_code, build_s=build.build_s, error_kind=build.error_kind,
            detail=build.detail(),
        )  # fmt: skip

    def harness_error(self, request: StepRequest, detail: str) -> StepResult:
        """The result of a step the harness failed to carry out (the runner raised)."""
        return self.result(request, Verdict.ERROR, error_kind=ErrorKind.HARNESS, detail=detail[:DETAIL_TAIL_BYTES])

    def _log_failed(self, request: StepRequest, error: OSError) -> StepResult:
        """The log could not be written (its command was stopped at that)."""
        return self._harness_failed(request, error, f"writing the step log {request.log_path}", Path(request.log_path))

    def _harness_failed(self, request: StepRequest, error: BaseException, doing: str, path: Path) -> StepResult:
        """A step the harness could not carry out (doing what, on which path): DISK_FULL when the disk is full,
        else HARNESS."""
        if _is_disk_full(error) or _nearly_full(path):
            where = _mount_point(path)
            detail = f"disk full: no space left on {where} {doing}; {DISK_FULL_ADVICE}"
            return self.result(request, Verdict.ERROR, error_kind=ErrorKind.DISK_FULL, detail=detail)
        message = " ".join(str(error).split())[:DETAIL_TAIL_BYTES]
        detail = f"harness failed {doing}: {message}"
        return self.result(request, Verdict.ERROR, error_kind=ErrorKind.HARNESS, detail=detail)

    def _header(self, request: StepRequest) -> str:
        gpus = ",".join(map(str, self.slot.gpus)) or "none"
        return (
            f"# gpu-bisect step {request.step_id} (bisect {request.bisect_id}, attempt {request.attempt})\n"
            f"# commit {request.sha}\n# worker {self.slot.name} on {self.slot.node}, GPUs {gpus}\n"
            f"# worktree {self.slot.worktree}\n# started {datetime.now(UTC).isoformat()}\n"
        )

    def result(self, request: StepRequest, verdict: Verdict, **values: object) -> StepResult:
        detail = str(values.get("detail", ""))
        if values.get("error_kind") is ErrorKind.DISK_FULL and DISK_FULL_ADVICE not in detail:
            first, newline, rest = detail.partition("\n")
            values["detail"] = f"{first}; {DISK_FULL_ADVICE}{newline}{rest}"
        return StepResult(
            step_id=request.step_id,
            sha=request.sha,
            verdict=verdict,
            log_path=request.log_path,
            worker=self.slot.name,
            node=self.slot.node,
            gpus=self.slot.gpus,
            **values,  # type: ignore[arg-type]
        )


def _is_disk_full(error: BaseException) -> bool:
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return DISK_FULL_SIGNATURE in str(error)  # git's message, through RepoError


def _nearly_full(path: Path) -> bool:
    """Whether the filesystem of path has (almost) no space left: git's "unable to write file" does not say why."""
    try:
        stats = os.statvfs(_mount_point(path))
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < NEARLY_FULL_BYTES


def _mount_point(path: Path) -> Path:
    """The mount point of the filesystem path is on (or would be on)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path
