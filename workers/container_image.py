"""A step's container image (--image-template): used where the engine has it or can pull it, else built from the
commit's Containerfile."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vocab.domain import ErrorKind, ImageInfo, StepResult, Verdict
from workers.container_engine import CONTAINERFILES, ContainerEngine
from workers.images.cache import now_iso
from workers.output import DETAIL_TAIL_BYTES
from workers.process import run_shell
from workers.step_context import StepContext

if TYPE_CHECKING:
    from workers.step import StepRunner


def container_record_id(reference: str) -> str:
    """The id of a container image whose build failed (16 hex digits, like an image key's)."""
    return hashlib.sha256(reference.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ContainerImages:
    """Getting the container images of one step runner's steps."""

    runner: StepRunner
    engine: ContainerEngine

    def obtain(self, step: StepContext, reference: str) -> ImageInfo | StepResult:
        """The ready image's info (build_s: this step's build, if it built it), or the step's result when there is
        none (a failed build: a skip; a cancel; a timeout; a harness error)."""
        found = self.engine.inspect(reference)
        if found is None and self.engine.pull_timeout_s > 0:
            command = self.engine.pull_command(reference)
            step.log.note(f"$ {command}\n")
            run_shell(
                command, step.workdir, step.env, step.log, min(self.engine.pull_timeout_s, step.command_timeout_s()),
                should_cancel=step.should_cancel, on_start=step.on_start, cancel_fd=step.cancel_fd,
            )  # fmt: skip
            found = self.engine.inspect(reference)
        if step.should_cancel():
            return self.runner.result(step.request, Verdict.CANCELLED, detail="cancelled")
        if found is not None:
            return self._found(step, reference, found)
        return self._build(step, reference, container_record_id(reference))

    def _build(self, step: StepContext, reference: str, record_id: str) -> ImageInfo | StepResult:
        request, runner = step.request, self.runner
        containerfile = next((name for name in CONTAINERFILES if (step.workdir / name).is_file()), None)
        if containerfile is None:
            detail = f"no container image {reference}, and no {' or '.join(CONTAINERFILES)} at the commit to build it"
            info = self._info(step, reference, record_id, request.sha, "built", 0.0, "failed", detail)
            return runner.result(request, Verdict.SKIP, detail=detail, image=info)
        command = self.engine.build_command(reference, containerfile, request.sha)
        step.log.note(f"$ {command}\n")
        build = run_shell(
            command, step.workdir, step.env, step.log, step.command_timeout_s(),
            should_cancel=step.should_cancel, on_start=step.on_start, cancel_fd=step.cancel_fd,
        )  # fmt: skip
        build_s = build.elapsed_s
        if step.log.error is not None:
            return runner.result(request, Verdict.ERROR, error_kind=ErrorKind.HARNESS, detail=str(step.log.error))
        if build.cancelled:
            return runner.result(request, Verdict.CANCELLED, build_s=build_s, detail="cancelled")
        if build.timed_out:
            detail = "container image build timed out"
            return runner.result(request, Verdict.ERROR, build_s=build_s, error_kind=ErrorKind.TIMEOUT, detail=detail)
        if build.exit_code < 0 or build.exit_code > 127:  # killed: says nothing about the commit
            detail = f"container image build died (exit {build.exit_code})\n{build.output.tail()}"
            return runner.result(request, Verdict.ERROR, exit_code=build.exit_code, build_s=build_s,
                                 error_kind=ErrorKind.SIGNAL, detail=detail)  # fmt: skip
        found = self.engine.inspect(reference) if build.exit_code == 0 else None
        if found is not None:
            return self._info(step, reference, found[0], request.sha, "built", build_s, "ready", "")
        tail = build.output.tail()
        info = self._info(step, reference, record_id, request.sha, "built", build_s, "failed", tail)
        detail = f"container image build failed (exit {build.exit_code})\n{tail[-(DETAIL_TAIL_BYTES - 64) :]}"
        return runner.result(request, Verdict.SKIP, exit_code=build.exit_code, build_s=build_s, detail=detail,
                             image=info)  # fmt: skip

    def _found(self, step: StepContext, reference: str, found: tuple[str, str]) -> ImageInfo:
        image_id, built_at = found
        source = "cache" if built_at else "artifact"
        step.log.note(f"# container image {reference} ({source}, {image_id.removeprefix('sha256:')[:12]})\n")
        return self._info(step, reference, image_id, built_at or step.request.sha, source, 0.0, "ready", "")

    def _info(
        self, step: StepContext, reference: str, image_id: str, sha: str, source: str, build_s: float, status: str,
        log_tail: str,
    ) -> ImageInfo:  # fmt: skip
        """The image as a step reports it: its id is the engine's image id's first 16 hex digits (a failed build's:
        its record's id); its path, the reference."""
        now = now_iso()
        return ImageInfo(
            id=image_id.removeprefix("sha256:")[:16], source=source, reused=source != "built", build_s=build_s,
            status=status, sha=sha, path=reference, node=self.runner.slot.node,
            key={"reference": reference, "engine": self.engine.binary}, created=now, last_used=now,
            log_tail=log_tail[-DETAIL_TAIL_BYTES:],
        )  # fmt: skip
