"""A worker process that runs one image step and prints its result as JSON: python want_image.py REPO SHA TMP ID."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from image_repo import image_request

from bisector.workers.step import StepRunner, WorkerSlot


def main() -> None:
    repo, sha, tmp, step_id = sys.argv[1:5]
    slot = StepRunner(WorkerSlot(f"w{step_id}", (), Path(tmp) / f"worktree-{step_id}"))
    result = slot.run(image_request(Path(repo), sha, Path(tmp), int(step_id)))
    print(json.dumps(asdict(result), default=str))


if __name__ == "__main__":
    main()
