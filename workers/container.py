"""Container images (`--image-template`): a step at commit C runs its test inside C's container image.

The image named by the template at C is used where the container engine has it or can pull it (source `artifact`;
not for a step with patches), or the one gpu-bisect built before for the step's recipe (source `cache`); else it is
built from the Containerfile or Dockerfile of C's worktree, patches applied, and tagged with the recipe (source
`built`; workers/container_image.py), once however many steps want it at once; a failed build skips the
commit and is remembered, like a venv image's (workers/container_image.py). The test then runs in a container named
for the step, the worktree mounted at WORKTREE_MOUNT and the working directory, the spec's env and the step's ids
passed, the slot's GPUs passed through CDI (or NVIDIA_VISIBLE_DEVICES). Killing the engine's client does not stop a
container, so whatever ends the run (its end, a cancel, the timeout) removes it by name, and so does a guard when
the client dies with its worker. The engine's settings: workers/container_engine.py.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import replace

from bisector.vocab.domain import StepResult
from bisector.workers.container_engine import ContainerEngine
from bisector.workers.container_image import ContainerImages
from bisector.workers.executor import StepRequest
from bisector.workers.images.cache import ImageCache
from bisector.workers.step_context import StepContext, StepJudge

PASSED_ENV = ("BISECT_SHA", "BISECT_STEP_ID", "BISECT_ATTEMPT", "BISECT_WORKER")  # with the spec's env


def container_name(request: StepRequest) -> str:
    """Unique on the host even when several stores number their steps alike."""
    return f"bisect-step-{request.bisect_id}-{request.step_id}-{request.attempt}-{uuid.uuid4().hex[:8]}"


def run_in_container(runner: StepJudge, step: StepContext, cache: ImageCache) -> StepResult:
    """Get the commit's image (use, pull or build it), then run the test in a container of it."""
    request = step.request
    assert request.container is not None
    engine = ContainerEngine.from_env(step.env)
    obtained = ContainerImages(runner, engine, cache).obtain(step, request.container)
    if isinstance(obtained, StepResult):
        return obtained
    if request.metric.json_file:  # a file left by an earlier run in the worktree must not be judged
        with contextlib.suppress(OSError):
            (step.workdir / request.metric.json_file).unlink()
    passed = {key: value for key, value in step.env.items() if key in request.env or key in PASSED_ENV}
    name = container_name(request)
    label = f"{request.bisect_id}/{request.step_id}/{request.attempt}"
    command = engine.run_command(
        obtained.path, step.workdir, passed, step.gpus, request.run_cmd, name=name, label=label
    )

    def client_started(pid: int) -> None:
        step.on_start(pid)
        engine.guard(name, pid)

    try:
        return runner.run_test(replace(step, on_start=client_started), obtained.build_s, obtained, command=command)
    finally:
        engine.remove_container(name)
