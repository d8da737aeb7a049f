"""The one place that wires the parts together: store, executor, observer, coordinator."""

from __future__ import annotations

from bisector.coordinator import Coordinator
from bisector.progress import ProgressObserver
from bisector.spec import BisectSpec
from db.store import Store
from vocab.errors import InputError
from workers.executor import Executor

EXECUTORS = ("local", "ray", "inprocess")


def open_store(url: str | None, *, read_only: bool = False) -> Store:
    """read_only: the command only reads; a read-only file or directory serves it (Store.open)."""
    return Store.open(url, read_only=read_only)


def make_executor(spec: BisectSpec) -> Executor:
    if spec.executor == "local":
        from workers.local import LocalExecutor

        return LocalExecutor(spec.repo, spec.workers, spec.gpus_per_step)
    if spec.executor == "ray":
        from workers.ray_executor import RayExecutor

        return RayExecutor(spec.repo, spec.workers, spec.gpus_per_step, spec.resources, spec.ray_address)
    if spec.executor == "inprocess":
        from workers.gpus import split_gpus, visible_gpus
        from workers.inprocess import InProcessExecutor

        return InProcessExecutor(spec.repo, spec.workers, split_gpus(visible_gpus(), spec.workers, spec.gpus_per_step))
    raise InputError(f"unknown executor {spec.executor!r} (known: {', '.join(EXECUTORS)})")


def check_executor(spec: BisectSpec) -> None:
    """Fail before anything is stored if the executor cannot serve the spec (unknown kind, too few GPUs)."""
    if spec.executor not in EXECUTORS:
        raise InputError(f"unknown executor {spec.executor!r} (known: {', '.join(EXECUTORS)})")
    if spec.executor == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise InputError("--executor ray needs Ray: pip install 'gpu-bisect[ray]'")
        from workers.ray_executor import checked_resources

        checked_resources(spec.resources)
    if spec.executor in ("local", "inprocess"):
        from workers.gpus import split_gpus, visible_gpus

        split_gpus(visible_gpus(), spec.workers, spec.gpus_per_step)


def make_coordinator(store: Store, observer: ProgressObserver | None = None) -> Coordinator:
    return Coordinator(store, make_executor, observer=observer)
