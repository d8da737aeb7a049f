"""Container images (`--image-template`): a step at commit C runs its test inside C's container image.

The image named by the template at C is used where the container engine has it or can pull it (source `artifact`,
or `cache` when gpu-bisect built it before: its label says so); else it is built from the Containerfile or
Dockerfile of C's worktree (source `built`; a failed build skips the commit, like a venv image's). The test then
runs in a container named for the step, the worktree mounted at WORKTREE_MOUNT and the working directory, the spec's
env and the step's ids passed, the slot's GPUs passed through CDI (or NVIDIA_VISIBLE_DEVICES). Killing the engine's
client does not stop a container, so whatever ends the run (its end, a cancel, the timeout) removes it by name,
and so does a guard when the client dies with its worker.

The engine and its extra flags come from the environment: BISECT_CONTAINER_ENGINE (default podman),
BISECT_CONTAINER_RUN_ARGS and BISECT_CONTAINER_BUILD_ARGS (shell words), BISECT_CONTAINER_PULL_TIMEOUT (seconds a
pull may take; 0: never pull), BISECT_CONTAINER_GPUS (cdi, the default, or env).
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from vocab.domain import ErrorKind, ImageInfo, StepResult, Verdict
from vocab.errors import InputError
from workers.executor import StepRequest
from workers.output import DETAIL_TAIL_BYTES, StepLog
from workers.process import run_shell

if TYPE_CHECKING:
    from workers.step import StepRunner

CONTAINERFILES = ("Containerfile", "Dockerfile")
BUILT_LABEL = "org.gpu-bisect.built-at"  # set on the images gpu-bisect builds: the commit they were built at
STEP_LABEL = "org.gpu-bisect.step"  # set on each step's container: bisect id, step id, attempt
WORKTREE_MOUNT = "/bisect/worktree"
PASSED_ENV = ("BISECT_SHA", "BISECT_STEP_ID", "BISECT_ATTEMPT", "BISECT_WORKER")  # with the spec's env
REMOVE_RETRY_S = 0.5  # between attempts to remove a container that is still there
ENGINE_CALL_TIMEOUT_S = 120.0  # an inspect or a removal that takes longer is given up
DEFAULT_PULL_TIMEOUT_S = 300.0


def container_reference(template: str | None, sha: str) -> str | None:
    """The commit's image reference: the template with {sha} (and {short}, 12 characters) filled."""
    if template is None:
        return None
    try:
        return template.format(sha=sha, short=sha[:12])
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(f"--image-template {template!r}: only {{sha}} and {{short}} can be filled ({exc})") from None


def check_container_template(template: str, image: str, artifact: str | None, executor: str) -> None:
    """Refuse an --image-template that cannot work with the other executor settings."""
    reference = container_reference(template, "0" * 40) or ""
    if not reference or any(c.isspace() for c in reference):
        raise InputError(f"--image-template {template!r}: an image reference has no spaces")
    if image != "none" or artifact is not None:
        raise InputError("--image-template runs steps in container images: leave out --image venv and --artifact")
    if executor == "ray":
        raise InputError("--image-template runs with the local executor only (Ray's image_uri is not supported)")


@dataclass(frozen=True)
class ContainerEngine:
    binary: str = "podman"
    run_args: tuple[str, ...] = ()
    build_args: tuple[str, ...] = ()
    pull_timeout_s: float = DEFAULT_PULL_TIMEOUT_S
    gpus: str = "cdi"  # cdi: --device nvidia.com/gpu=N; env: NVIDIA_VISIBLE_DEVICES (the NVIDIA runtime hook)
    env: Mapping[str, str] | None = None  # the engine's environment (the step's: its env may configure the engine)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ContainerEngine:
        try:
            pull_timeout_s = float(env.get("BISECT_CONTAINER_PULL_TIMEOUT", DEFAULT_PULL_TIMEOUT_S))
        except ValueError:
            pull_timeout_s = DEFAULT_PULL_TIMEOUT_S
        return cls(
            binary=env.get("BISECT_CONTAINER_ENGINE") or "podman",
            run_args=tuple(shlex.split(env.get("BISECT_CONTAINER_RUN_ARGS", ""))),
            build_args=tuple(shlex.split(env.get("BISECT_CONTAINER_BUILD_ARGS", ""))),
            pull_timeout_s=pull_timeout_s,
            gpus=env.get("BISECT_CONTAINER_GPUS", "cdi"),
            env=dict(env),
        )

    def inspect(self, reference: str) -> tuple[str, str] | None:
        """(image id, the commit gpu-bisect built it at or "") of a local image; None when the engine has none."""
        template = f'{{{{.Id}}}} {{{{index .Labels "{BUILT_LABEL}"}}}}'
        try:
            done = subprocess.run(
                [self.binary, "image", "inspect", "--format", template, reference],
                capture_output=True, text=True, env=self.env, timeout=ENGINE_CALL_TIMEOUT_S, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode != 0 or not done.stdout.strip():
            return None
        image_id, _, built_at = done.stdout.strip().partition(" ")
        return image_id, "" if built_at == "<no value>" else built_at.strip()

    def remove_container(self, name: str) -> None:
        """Stop and remove the container at once, if it is there; returns once the engine no longer has it (a
        container still being created when its client was killed can outlive the first `rm`), or after
        ENGINE_CALL_TIMEOUT_S."""
        deadline = time.monotonic() + ENGINE_CALL_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(
                    [self.binary, "rm", "--force", "--ignore", "--time", "0", name],
                    capture_output=True, env=self.env, timeout=ENGINE_CALL_TIMEOUT_S, check=False,
                )  # fmt: skip
                exists = subprocess.run(
                    [self.binary, "container", "exists", name],
                    capture_output=True, env=self.env, timeout=ENGINE_CALL_TIMEOUT_S, check=False,
                )  # fmt: skip
                if exists.returncode == 1:  # 0: still there; anything else: the engine cannot tell
                    return
            if time.monotonic() >= deadline:
                return
            time.sleep(REMOVE_RETRY_S)

    def guard(self, name: str, client_pid: int) -> None:
        """Remove the container once the engine's client is gone, however it went (its worker killed outright, its
        process group reaped): a shell of its own session outlives both, polling the pid each second."""
        loop = '(while kill -0 "$1" 2>/dev/null; do sleep 1; done; shift; exec "$@") >/dev/null 2>&1 </dev/null &'
        argv = ["sh", "-c", loop, "sh", str(client_pid), self.binary, "rm", "--force", "--ignore", "--time", "0", name]
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(argv, env=self.env, start_new_session=True, timeout=ENGINE_CALL_TIMEOUT_S, check=False)

    def pull_command(self, reference: str) -> str:
        return shlex.join([self.binary, "pull", "--quiet", reference])

    def build_command(self, reference: str, containerfile: str, sha: str) -> str:
        argv = [self.binary, "build", *self.build_args, "--label", f"{BUILT_LABEL}={sha}", "-f", containerfile]
        return shlex.join([*argv, "-t", reference, "."])

    def run_command(
        self, reference: str, name: str, label: str, worktree: Path, env: Mapping[str, str], gpus: tuple[int, ...]
    ) -> list[str]:
        """The argv of the step's container, but for the test command. Values of env are not in it: `-e NAME`
        takes each from the engine client's environment."""
        argv = [self.binary, "run", "--rm", "--name", name, "--label", f"{STEP_LABEL}={label}", *self.run_args]
        argv += ["-v", f"{worktree}:{WORKTREE_MOUNT}", "-w", WORKTREE_MOUNT]
        for key in env:
            argv += ["-e", key]
        if gpus and self.gpus == "env":
            argv += ["-e", f"NVIDIA_VISIBLE_DEVICES={','.join(map(str, gpus))}"]
        elif gpus:
            for gpu in gpus:
                argv += ["--device", f"nvidia.com/gpu={gpu}"]
        return [*argv, reference]


def container_name(request: StepRequest) -> str:
    """Unique on the host even when several stores number their steps alike."""
    return f"bisect-step-{request.bisect_id}-{request.step_id}-{request.attempt}-{uuid.uuid4().hex[:8]}"


def run_in_container(
    runner: StepRunner,
    request: StepRequest,
    log: StepLog,
    env: dict[str, str],
    started: float,
    should_cancel: Callable[[], bool],
    on_start: Callable[[int], None],
    cancel_fd: int | None,
) -> StepResult:
    """Get the commit's image (use, pull or build it), then run the test in a container of it."""
    from workers.step import time_left_s

    def time_left() -> float:
        return max(time_left_s(request, started), 0.001)

    assert request.container is not None
    reference = request.container
    engine = ContainerEngine.from_env(env)
    worktree = runner.slot.worktree
    found = engine.inspect(reference)
    build_s = 0.0
    if found is None and engine.pull_timeout_s > 0:
        log.note(f"$ {engine.pull_command(reference)}\n")
        run_shell(
            engine.pull_command(reference), worktree, env, log, min(engine.pull_timeout_s, time_left()),
            should_cancel=should_cancel, on_start=on_start, cancel_fd=cancel_fd,
        )  # fmt: skip
        found = engine.inspect(reference)
    if should_cancel():
        return runner.result(request, Verdict.CANCELLED, detail="cancelled")
    if found is not None:
        image_id, built_at = found
        source = "cache" if built_at else "artifact"
        log.note(f"# container image {reference} ({source}, {image_id[:12]})\n")
    else:
        containerfile = next((name for name in CONTAINERFILES if (worktree / name).is_file()), None)
        if containerfile is None:
            detail = f"no container image {reference}, and no {' or '.join(CONTAINERFILES)} at the commit to build it"
            info = _info(engine, request, runner.slot.node, reference, "", "built", 0.0, "failed", detail)
            return runner.result(request, Verdict.SKIP, detail=detail, image=info)
        command = engine.build_command(reference, containerfile, request.sha)
        log.note(f"$ {command}\n")
        build = run_shell(
            command, worktree, env, log, time_left(),
            should_cancel=should_cancel, on_start=on_start, cancel_fd=cancel_fd,
        )  # fmt: skip
        build_s = build.elapsed_s
        if log.error is not None:
            return runner.result(request, Verdict.ERROR, error_kind=ErrorKind.HARNESS, detail=str(log.error))
        if build.cancelled:
            return runner.result(request, Verdict.CANCELLED, build_s=build_s, detail="cancelled")
        if build.timed_out:
            detail = "container image build timed out"
            return runner.result(request, Verdict.ERROR, build_s=build_s, error_kind=ErrorKind.TIMEOUT, detail=detail)
        if build.exit_code < 0 or build.exit_code > 127:  # killed: says nothing about the commit
            detail = f"container image build died (exit {build.exit_code})\n{build.output.tail()}"
            kind = ErrorKind.SIGNAL
            return runner.result(request, Verdict.ERROR, exit_code=build.exit_code, build_s=build_s,
                                 error_kind=kind, detail=detail)  # fmt: skip
        found = engine.inspect(reference) if build.exit_code == 0 else None
        if found is None:
            tail = build.output.tail()
            detail = f"container image build failed (exit {build.exit_code})\n{tail[-(DETAIL_TAIL_BYTES - 64) :]}"
            info = _info(engine, request, runner.slot.node, reference, "", "built", build_s, "failed", tail)
            return runner.result(request, Verdict.SKIP, exit_code=build.exit_code, build_s=build_s, detail=detail,
                                 image=info)  # fmt: skip
        image_id, source = found[0], "built"
    info = _info(engine, request, runner.slot.node, reference, image_id, source, build_s, "ready", "")
    if request.metric.json_file:  # a file left by an earlier run in the worktree must not be judged
        with contextlib.suppress(OSError):
            (worktree / request.metric.json_file).unlink()
    passed = {key: value for key, value in env.items() if key in request.env or key in PASSED_ENV}
    name = container_name(request)
    label = f"{request.bisect_id}/{request.step_id}/{request.attempt}"
    argv = engine.run_command(reference, name, label, worktree, passed, runner.slot.gpus)
    command = shlex.join([*argv, "sh", "-c", request.run_cmd])

    def client_started(pid: int) -> None:
        on_start(pid)
        engine.guard(name, pid)

    try:
        return runner.run_test(
            request, log, env, worktree, started, build_s, info,
            should_cancel, client_started, cancel_fd, command=command,
        )  # fmt: skip
    finally:
        engine.remove_container(name)


def _info(
    engine: ContainerEngine, request: StepRequest, node: str, reference: str, image_id: str, source: str,
    build_s: float, status: str, log_tail: str,
) -> ImageInfo:  # fmt: skip
    """The image as a step reports it: its id is the engine's image id's first 16 hex digits (a failed build's:
    the reference's hash)."""
    now = datetime.now(UTC).isoformat()
    short = image_id.removeprefix("sha256:")[:16] or hashlib.sha256(reference.encode()).hexdigest()[:16]
    return ImageInfo(
        id=short, source=source, reused=source != "built", build_s=build_s, status=status, sha=request.sha,
        path=reference, node=node, key={"reference": reference, "engine": engine.binary},
        created=now, last_used=now, log_tail=log_tail[-DETAIL_TAIL_BYTES:],
    )  # fmt: skip
