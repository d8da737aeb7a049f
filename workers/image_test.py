"""A step's test handed to another process that runs it inside its image's interpreter (on Ray: a short-lived
actor started with the image venv's python, workers/ray_image_host.py); the image is prepared and held by the
step's own runner meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bisector.vocab.domain import ImageInfo, StepResult
from bisector.workers.executor import StepRequest
from bisector.workers.output import StepLog


@dataclass(frozen=True)
class ImageTest:
    request: StepRequest  # its log_path is the step's log, to which the test's output is appended
    env: dict[str, str]  # the step's environment with the image's (VIRTUAL_ENV, PATH, cache dirs)
    run_dir: Path  # the image's tree with its build outputs
    python: str  # the image venv's interpreter
    started: float  # time.monotonic() at the step's start on this node: its timeout covers the build and the test
    build_s: float
    image: ImageInfo | None


ImageTestHost = Callable[[ImageTest, StepLog, Callable[[], bool]], StepResult | None]
"""host(test, log, should_cancel): runs the test in the image's interpreter and returns its result, or None when it
cannot (with a note in the log saying why): the step's runner then runs the test itself."""
