"""StepRunner: test one commit on one worker slot — check out, build, run, judge.

Runs on the worker (a local worker process, a Ray actor, or in-process for tests). It never writes
to the store: it returns a StepResult and the coordinator records it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bisector.domain import ErrorKind, StepResult, Verdict
from bisector.errors import RepoError
from bisector.gitrepo import GitRepo
from bisector.metric import infra_signature, judge_run
from workers.executor import StepRequest
from workers.process import run_shell

LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class WorkerSlot:
    name: str
    gpus: tuple[int, ...]
    worktree: Path
    node: str = socket.gethostname()


def step_environment(
    request: StepRequest, gpus: tuple[int, ...], base: dict[str, str], worker: str = ""
) -> dict[str, str]:
    """The environment a step's commands see: the base, the spec's env, the GPU slot, the step's ids."""
    env = dict(base)
    env.update(request.env)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env["BISECT_SHA"] = request.sha
    env["BISECT_STEP_ID"] = str(request.step_id)
    env["BISECT_ATTEMPT"] = str(request.attempt)
    if worker:
        env["BISECT_WORKER"] = worker
    return env


def reproduce_command(repo: str, sha: str, build_cmd: str | None, run_cmd: str, env: dict[str, str]) -> str:
    """A shell command line that re-runs one step by hand in a fresh worktree."""
    workdir = f"/tmp/bisect-repro-{sha[:12]}"
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    parts = [
        f"git -C {shlex.quote(repo)} worktree add --detach {workdir} {sha}",
        f"cd {workdir}",
    ]
    if build_cmd:
        parts.append(f"{exports + ' ' if exports else ''}bash -c {shlex.quote(build_cmd)}")
    parts.append(f"{exports + ' ' if exports else ''}bash -c {shlex.quote(run_cmd)}")
    return " && ".join(parts)


class StepRunner:
    def __init__(self, slot: WorkerSlot, clean_for: str | None = None, opened: Sequence[GitRepo] = ()) -> None:
        """clean_for: the repo for which the slot's worktree is known to hold no untracked files (just made or
        cleaned by the caller), so the first step needs only a checkout. opened: repositories the caller has
        opened already (with their worktree handles), so the first step does not pay for opening them."""
        self.slot = slot
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
    ) -> StepResult:
        """cancel_fd: a CancelSignal's, so that a cancel stops the running command at once (run_shell)."""
        log_path = Path(request.log_path)
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            clean = self._tidy_repo != request.repo
            self._tidy_repo = None
            self._repo(request.repo).ensure_worktree(self.slot.worktree, request.sha, clean=clean)
        except (OSError, RepoError) as exc:
            return self._result(request, Verdict.ERROR, error_kind=ErrorKind.HARNESS, detail=str(exc))
        env = step_environment(request, self.slot.gpus, dict(os.environ), self.slot.name)
        log_path.unlink(missing_ok=True)
        with log_path.open("ab") as log:  # append mode: our lines and the commands' output interleave in order
            log.write(self._header(request).encode())
            log.flush()
            build_s = 0.0
            remaining_s = request.timeout_s
            if request.build_cmd:
                log.write(f"$ {request.build_cmd}\n".encode())
                log.flush()
                build = run_shell(
                    request.build_cmd, self.slot.worktree, env, log, remaining_s,
                    should_cancel=should_cancel, on_start=on_start, cancel_fd=cancel_fd,
                )  # fmt: skip
                build_s = build.elapsed_s
                remaining_s -= build_s
                if build.cancelled:
                    return self._result(request, Verdict.CANCELLED, build_s=build_s, detail="cancelled")
                if build.timed_out:
                    return self._result(
                        request, Verdict.ERROR, exit_code=build.exit_code, build_s=build_s,
                        error_kind=ErrorKind.TIMEOUT, detail="build timed out",
                    )  # fmt: skip
                if build.exit_code != 0:
                    log.flush()
                    return self._build_failed(request, build.exit_code, build_s)
            log.write(f"$ {request.run_cmd}\n".encode())
            log.flush()
            run_offset = os.fstat(log.fileno()).st_size
            run = run_shell(
                request.run_cmd, self.slot.worktree, env, log, max(remaining_s, 0.001),
                should_cancel=should_cancel, on_start=on_start, cancel_fd=cancel_fd,
            )  # fmt: skip
        if run.cancelled:
            return self._result(request, Verdict.CANCELLED, build_s=build_s, run_s=run.elapsed_s, detail="cancelled")
        output = _read_from(log_path, run_offset)
        judgement = judge_run(request.metric, run.exit_code, output, self.slot.worktree, timed_out=run.timed_out)
        detail = judgement.detail
        if judgement.verdict in (Verdict.SKIP, Verdict.ERROR) or (not judgement.samples and run.exit_code != 0):
            detail = f"{detail}\n{_tail(output)}".strip()
        return self._result(
            request, judgement.verdict, samples=judgement.samples, exit_code=run.exit_code,
            build_s=build_s, run_s=run.elapsed_s, error_kind=judgement.error_kind, detail=detail,
        )  # fmt: skip

    def _build_failed(self, request: StepRequest, exit_code: int, build_s: float) -> StepResult:
        output = _read_from(Path(request.log_path), 0)
        signature = infra_signature(output, request.metric.infra_patterns)
        if signature is not None or exit_code < 0 or exit_code > 127:
            why = f"infrastructure: {signature}" if signature else f"build died (exit {exit_code})"
            kind = ErrorKind.INFRA if signature else ErrorKind.SIGNAL
            return self._result(
                request, Verdict.ERROR, exit_code=exit_code, build_s=build_s, error_kind=kind,
                detail=f"{why}\n{_tail(output)}",
            )  # fmt: skip
        return self._result(
            request, Verdict.SKIP, exit_code=exit_code, build_s=build_s,
            detail=f"build failed (exit {exit_code})\n{_tail(output)}",
        )  # fmt: skip

    def _header(self, request: StepRequest) -> str:
        gpus = ",".join(map(str, self.slot.gpus)) or "none"
        return (
            f"# gpu-bisect step {request.step_id} (bisect {request.bisect_id}, attempt {request.attempt})\n"
            f"# commit {request.sha}\n# worker {self.slot.name} on {self.slot.node}, GPUs {gpus}\n"
            f"# worktree {self.slot.worktree}\n# started {datetime.now(UTC).isoformat()}\n"
        )

    def _result(self, request: StepRequest, verdict: Verdict, **values: object) -> StepResult:
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


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _tail(output: str, lines: int = LOG_TAIL_LINES) -> str:
    kept = output.rstrip().splitlines()[-lines:]
    return "\n".join(f"  | {line}" for line in kept)
