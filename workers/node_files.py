"""The files a step writes for the coordinator (the --prune probe's folder, a traced run's trace), when the step runs
on another node than the coordinator's.

The coordinator names them in the step's env by paths under the bisect's log folder, the folder of the step's
log. On another node those variables get the same paths under the node's own log folder; what the step writes
there comes back with its result (at most MAX_SHIPPED_BYTES in all, else none and, in each folder, a note saying
why: UNSHIPPED_FILE) and is written at the coordinator's paths. Entries of PYTHONPATH inside the coordinator's
copy of this package (the trace hooks) that this node lacks become this node's copy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from bisector.workers.executor import StepRequest

MAX_SHIPPED_BYTES = 512 << 20
UNSHIPPED_FILE = "files-not-shipped.txt"
PACKAGE_DIR = Path(__file__).parents[1]  # this node's copy of the package (as workers/ray_cluster.py ships it)


@dataclass(frozen=True)
class NodeFiles:
    """The coordinator's paths a step's env names, and where they are on this node."""

    moved: Mapping[str, Path]

    @classmethod
    def of(cls, request: StepRequest, local_log_dir: Path) -> tuple[StepRequest, NodeFiles]:
        """request as it runs on this node, and its files; what an earlier step left at those paths is removed."""
        coordinator_dir = Path(request.log_path).parent
        env, moved = dict(request.env), {}
        for name, value in request.env.items():
            if name == "PYTHONPATH":
                env[name] = os.pathsep.join(_this_nodes_copy(entry) for entry in value.split(os.pathsep))
            elif value and Path(value).is_relative_to(coordinator_dir) and Path(value) != coordinator_dir:
                local = local_log_dir / Path(value).relative_to(coordinator_dir)
                env[name], moved[value] = str(local), local
        for local in moved.values():
            with contextlib.suppress(OSError):  # the step's own log, in the same folder, reports a broken disk
                if local.is_dir():
                    shutil.rmtree(local)
                local.unlink(missing_ok=True)
                local.parent.mkdir(parents=True, exist_ok=True)
        return replace(request, env=env), cls(moved)

    def collect(self, limit_bytes: int = MAX_SHIPPED_BYTES) -> dict[str, bytes]:
        """What the step wrote, by the coordinator's path; a note in each folder instead, when it cannot come."""
        try:
            return self._collect(limit_bytes)
        except OSError as exc:
            return self._unshipped(f"reading them on {os.uname().nodename} failed: {exc}")

    def _collect(self, limit_bytes: int) -> dict[str, bytes]:
        found = {
            str(Path(coordinator) / file.relative_to(local)) if local.is_dir() else coordinator: file
            for coordinator, local in self.moved.items()
            for file in (sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else [local])
            if file.is_file()
        }
        size = sum(file.stat().st_size for file in found.values())
        if size <= limit_bytes:
            return {coordinator: file.read_bytes() for coordinator, file in found.items()}
        return self._unshipped(f"{size} bytes on {os.uname().nodename}, over the {limit_bytes} shipped")

    def _unshipped(self, why: str) -> dict[str, bytes]:
        folders = [coordinator for coordinator, local in self.moved.items() if local.is_dir()]
        return {str(Path(folder) / UNSHIPPED_FILE): why.encode() for folder in folders}


def deliver(files: Mapping[str, bytes]) -> None:
    """Write a step's shipped files at the coordinator's paths (raises OSError)."""
    for path, data in files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)


def _this_nodes_copy(entry: str) -> str:
    _, found, inside = entry.rpartition(f"/{PACKAGE_DIR.name}/")
    if not found or os.path.exists(entry) or not (PACKAGE_DIR / inside).exists():
        return entry
    return str(PACKAGE_DIR / inside)
