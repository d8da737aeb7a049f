"""What the coordinator asks a worker slot to run (StepRequest) and the environment a step's commands see."""

from __future__ import annotations

from dataclasses import dataclass, field

from bisector.vocab.errors import ExecutorError
from bisector.vocab.metric import MetricSpec
from bisector.vocab.patches import Patch
from bisector.workers.gpus import visible_gpus
from bisector.workers.images.key import ImageRecipe, container_recipe

PLAIN_CONTAINER_RECIPE = container_recipe(None, (), {})  # of a spec with no build, patches or env


@dataclass(frozen=True)
class StepRequest:
    step_id: int
    bisect_id: int
    sha: str
    attempt: int
    repo: str
    run_cmd: str
    metric: MetricSpec
    log_path: str
    timeout_s: float
    build_cmd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    avoid_workers: frozenset[str] = frozenset()  # workers that already failed this commit
    pin_worker: str = ""  # run on exactly this worker (it must be free): confirmation pairs, reference checks
    image: ImageRecipe | None = None  # build once per image and run there (workers/images), not in the worktree
    preemptible: bool = False  # a search run: a shared pool may cancel it for a bisect holding no slot
    container: str | None = None  # the commit's container image: the test runs in it (workers/container.py)
    # the spec's build, patches and env (workers/images/key.container_recipe): the container image gpu-bisect builds
    # for the step is tagged with it, so that it serves only steps of the same recipe
    container_recipe: str = PLAIN_CONTAINER_RECIPE
    no_gpu: bool = False  # --gpus-per-step 0: the step sees no GPU (CUDA_VISIBLE_DEVICES empty), whatever its slot has
    # Applied on the commit in the worktree before its build and test (vocab/patches.py). A step on an image has its
    # patches in its recipe only: the image's builder applies them to the tree the image holds.
    patches: tuple[Patch, ...] = ()

    def __post_init__(self) -> None:
        if self.image is not None and self.patches:
            raise ExecutorError("a step on an image carries its patches in its image recipe only")


def step_environment(
    request: StepRequest, gpus: tuple[int, ...], base: dict[str, str], worker: str = ""
) -> dict[str, str]:
    """The environment a step's commands see: the base, the spec's env, the GPU slot (none for a no_gpu request),
    the step's ids."""
    env = dict(base)
    env.update(request.env)
    if gpus or request.no_gpu:
        env["CUDA_VISIBLE_DEVICES"] = "" if request.no_gpu else ",".join(str(g) for g in gpus)
    env["BISECT_SHA"] = request.sha
    env["BISECT_STEP_ID"] = str(request.step_id)
    env["BISECT_ATTEMPT"] = str(request.attempt)
    if worker:
        env["BISECT_WORKER"] = worker
    return env


def image_build_environment(request: StepRequest, step_env: dict[str, str]) -> dict[str, str]:
    """The environment the build of request's image sees: its step's, with the host's GPUs (visible_gpus(), which
    the slots are cut from; none for a no_gpu request) in place of the slot's. A build made ahead and one made by a
    step on any slot of the host see the same GPUs, so they make the same image (its key names their architectures)."""
    gpus = () if request.no_gpu else visible_gpus()
    return {**step_env, "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in gpus)}
