"""A step's container image (--image-template): used where the engine has it or can pull it, else built from the
commit's Containerfile, once however many steps want it at once; a failed build is remembered.

An image gpu-bisect builds is tagged built_reference(reference, the step's recipe) (workers/container_engine.py): its
recipe hash is a venv image's of the spec's build, patches and env (workers/images/key.py), so it serves exactly the
steps of that recipe. The template's own reference answers only for an image gpu-bisect did not build (a published
one, pulled where the engine lacks it) and only for steps without patches: it was not made of a patched tree. An
image at that reference labelled as built by gpu-bisect (BUILT_LABEL), whose recipe is unknown, is never used.

The image's lock and its failure record live in the image cache root (workers/images/cache.py) under the id
container_record_id(built reference): `locks/<id>.lock` (flock, exclusive while a step pulls or builds the image: it
dies with its holder, so a builder that crashed blocks no one) and `<id>/manifest.json` (status failed, the build's
log tail: steps wanting that image skip without building until `bisect images rm <id>`, as after a failed venv
image build). An image the engine has is used without the lock: the engine's tag changes atomically.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from bisector.vocab.domain import CANCELLED_DETAIL, ErrorKind, ImageInfo, StepResult, Verdict
from bisector.workers.build_outcome import BuildEnd, judge_build
from bisector.workers.container_engine import CONTAINERFILES, ContainerEngine, built_reference, outliving_its_reader
from bisector.workers.images.cache import ImageCache, ImageManifest, ImageStatus, LockTimeoutError, now_iso
from bisector.workers.output import DETAIL_TAIL_BYTES
from bisector.workers.process import run_shell
from bisector.workers.step_context import StepContext, StepJudge

MISSING = "missing"  # an image's source when the engine has none and the commit has no Containerfile to build it


def container_record_id(reference: str) -> str:
    """The id of a container image's lock and failure record (16 hex digits, like an image key's)."""
    return hashlib.sha256(reference.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ContainerImages:
    """Getting the container images of one step runner's steps."""

    runner: StepJudge
    engine: ContainerEngine
    cache: ImageCache

    def obtain(self, step: StepContext, reference: str) -> ImageInfo | StepResult:
        """The ready image's info (its path: the reference it is run by; build_s: this step's build, if it built it),
        or the step's result when there is none (a stored or new failed build: a skip; a cancel; a timeout; a harness
        error)."""
        built = built_reference(reference, step.request.container_recipe)
        record_id = container_record_id(built)
        found = self._inspect(step, reference, built)
        if found is not None:
            self._forget_failure(record_id)  # an image made since (by hand, by CI) answers for the reference
            return self._found(step, *found)

        def waiting() -> None:
            step.log.note(f"# container image {built}: another step is pulling or building it; waiting\n")

        try:
            with self.cache.lock(
                record_id, timeout_s=max(step.time_left_s(), 0), should_cancel=step.should_cancel, on_wait=waiting
            ):
                return self._obtain_held(step, reference, built, record_id)
        except LockTimeoutError:
            if step.should_cancel():
                return self.runner.result(step.request, Verdict.CANCELLED, detail=CANCELLED_DETAIL)
            detail = f"timed out waiting for another step's pull or build of container image {built}"
            return self.runner.result(step.request, Verdict.ERROR, error_kind=ErrorKind.TIMEOUT, detail=detail)

    def _inspect(self, step: StepContext, reference: str, built: str) -> tuple[str, tuple[str, str]] | None:
        """The image the step can run on, as (its reference, the engine's (id, built-at label)): the one gpu-bisect
        built for its recipe, else (for a step without patches) one at the template's reference that it did not
        build."""
        found = self.engine.inspect(built)
        if found is not None:
            return built, found
        if not step.request.patches and (published := self.engine.inspect(reference)) and not published[1]:
            return reference, published
        return None

    def _obtain_held(self, step: StepContext, reference: str, built: str, record_id: str) -> ImageInfo | StepResult:
        found = self._inspect(step, reference, built)  # made by the step that held the lock before
        if found is not None:
            return self._found(step, *found)
        failed = self.cache.manifest(record_id)
        if failed is not None and failed.status is ImageStatus.FAILED:
            detail = (
                f"container image {built} failed to build at {failed.sha[:12]} "
                f"(`bisect images rm {record_id}` to build it again)\n{failed.log_tail}"
            )
            step.log.note(f"# {detail.splitlines()[0]}\n")
            info = self._info(step, built, record_id, failed.sha, "cache", 0.0, "failed", failed.log_tail)
            return self.runner.result(step.request, Verdict.SKIP, detail=detail.strip(), image=info)
        if self.engine.pull_timeout_s > 0 and not step.request.patches:
            command = self.engine.pull_command(reference)
            step.log.note(f"$ {command}\n")
            run_shell(
                command, step.workdir, step.env, step.log, min(self.engine.pull_timeout_s, step.command_timeout_s()),
                should_cancel=step.should_cancel, on_start=step.on_start, cancel_fd=step.cancel_fd,
            )  # fmt: skip
            found = self._inspect(step, reference, built)
            if found is not None:
                return self._found(step, *found)
        if step.should_cancel():
            return self.runner.result(step.request, Verdict.CANCELLED, detail=CANCELLED_DETAIL)
        return self._build(step, reference, built, record_id)

    def _build(self, step: StepContext, reference: str, built: str, record_id: str) -> ImageInfo | StepResult:
        request, runner = step.request, self.runner
        containerfile = next((name for name in CONTAINERFILES if (step.workdir / name).is_file()), None)
        if containerfile is None:
            wanted = built if request.patches else reference
            detail = f"no container image {wanted}, and no {' or '.join(CONTAINERFILES)} at the commit to build it"
            info = self._info(step, wanted, record_id, request.sha, MISSING, 0.0, "failed", detail)
            return runner.result(request, Verdict.SKIP, detail=detail, image=info)
        command = self.engine.build_command(built, containerfile, request.sha)
        step.log.note(f"$ {command}\n")
        process = run_shell(
            outliving_its_reader(command), step.workdir, step.env, step.log, step.command_timeout_s(),
            should_cancel=step.should_cancel, on_start=step.on_start, cancel_fd=step.cancel_fd,
        )  # fmt: skip
        build = judge_build(process, "container image build", request.metric.infra_patterns)
        build_s = build.build_s
        if build.end is BuildEnd.LOG_FAILED:
            return runner.result(request, Verdict.ERROR, error_kind=ErrorKind.HARNESS, detail=str(process.log_error))
        if build.end is BuildEnd.CANCELLED:
            return runner.result(request, Verdict.CANCELLED, build_s=build_s, detail=build.why)
        if build.end is BuildEnd.TIMED_OUT:
            return runner.result(request, Verdict.ERROR, build_s=build_s, error_kind=build.error_kind, detail=build.why)
        if build.end is BuildEnd.INFRA:  # killed: says nothing about the commit
            return runner.result(request, Verdict.ERROR, exit_code=build.exit_code, build_s=build_s,
                                 error_kind=build.error_kind, detail=build.detail())  # fmt: skip
        if build.end is BuildEnd.SUCCEEDED:
            found = self.engine.inspect(built)
            if found is not None:
                return self._info(step, built, found[0], request.sha, "built", build_s, "ready", "")
            build = replace(build, end=BuildEnd.FAILED)  # no image after it: as a failed build
        info = self._info(step, built, record_id, request.sha, "built", build_s, "failed", process.output.tail())
        self._remember_failure(request.repo, info, record_id)
        detail = build.detail(tail_chars=DETAIL_TAIL_BYTES - 64)
        return runner.result(request, Verdict.SKIP, exit_code=build.exit_code, build_s=build_s, detail=detail,
                             image=info)  # fmt: skip

    def _remember_failure(self, repo: str, info: ImageInfo, record_id: str) -> None:
        """Store a failed build's record: later steps wanting its reference skip with its log tail."""
        failed = ImageManifest(
            id=record_id, key=info.key, repo=repo, sha=info.sha, node=self.cache.node, status=ImageStatus.FAILED,
            created=info.created, last_used=info.last_used, build_s=info.build_s, log_tail=info.log_tail,
        )  # fmt: skip
        self.cache.write_manifest(failed)

    def _found(self, step: StepContext, reference: str, found: tuple[str, str]) -> ImageInfo:
        image_id, built_at = found
        source = "cache" if built_at else "artifact"
        step.log.note(f"# container image {reference} ({source}, {image_id.removeprefix('sha256:')[:12]})\n")
        return self._info(step, reference, image_id, built_at or step.request.sha, source, 0.0, "ready", "")

    def _forget_failure(self, record_id: str) -> None:
        failed = self.cache.manifest(record_id)
        if failed is not None and failed.status is ImageStatus.FAILED:
            self.cache.remove(record_id)  # not when a step holds its lock: it finds the image then

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
