"""The one place that wires the parts together: store, executor, observer, coordinator."""

from __future__ import annotations

import contextlib
import sys

from bisector.core.options import ExecutorKind, ImageMode
from bisector.core.spec import BisectSpec
from bisector.db.engine import missing_sqlite_file
from bisector.db.store import Store
from bisector.runner.coordinator import Coordinator
from bisector.runner.observer import ProgressObserver
from bisector.vocab.domain import BisectRecord
from bisector.vocab.errors import InputError, StoreError
from bisector.workers.executor import Executor


def open_store(url: str | None, *, read_only: bool = False) -> Store:
    """read_only: the command only reads; a read-only file or directory serves it (Store.open). A command that
    only reads never makes a store: a --db / $BISECT_DB naming no SQLite file is a mistyped path, not an empty
    history (the default store is made on first use, so a new user's `bisect list` is empty, not an error)."""
    if read_only and url is not None:
        missing = missing_sqlite_file(url)
        if missing is not None:
            raise StoreError(f"no store at {missing}: check --db / $BISECT_DB (the first `bisect start` makes one)")
    return Store.open(url, read_only=read_only)


def make_executor(spec: BisectSpec) -> Executor:
    where = spec.executor
    if where.kind is ExecutorKind.LOCAL:
        from bisector.workers.local import LocalExecutor

        return LocalExecutor(spec.repo, where.workers, where.gpus_per_step, worktrees=where.image is ImageMode.NONE)
    if where.kind is ExecutorKind.RAY:
        from bisector.workers.ray_executor import RayExecutor

        return RayExecutor(spec.repo, where.workers, where.gpus_per_step, where.resources, where.ray_address)
    from bisector.workers.gpus import split_gpus, visible_gpus
    from bisector.workers.inprocess import InProcessExecutor

    return InProcessExecutor(spec.repo, where.workers, split_gpus(visible_gpus(), where.workers, where.gpus_per_step))


def check_executor(spec: BisectSpec) -> None:
    """Fail before anything is stored if the executor cannot serve the spec (Ray missing, too few GPUs)."""
    where = spec.executor
    if where.kind is ExecutorKind.RAY:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise InputError("--executor ray needs Ray: pip install 'gpu-bisect[ray]'")
        from bisector.workers.ray_executor import checked_resources

        checked_resources(where.resources)
    else:
        from bisector.workers.gpus import split_gpus, visible_gpus

        split_gpus(visible_gpus(), where.workers, where.gpus_per_step)


def make_coordinator(store: Store, observer: ProgressObserver | None = None) -> Coordinator:
    return Coordinator(store, make_executor, observer=observer)


def run_bisect(
    store: Store, spec: BisectSpec, observer: ProgressObserver | None = None, executor: Executor | None = None
) -> BisectRecord:
    """Run a bisect from its spec to its end: the one entry of `bisect start` and triage's submissions.

    The executor is checked before anything is stored; pass one already made (its workers boot while the caller
    opens the store) or let it be made here and closed at the end. stdout stays the caller's (Ray prints to it).
    """
    with contextlib.ExitStack() as stack:
        if executor is None:
            check_executor(spec)
            with contextlib.redirect_stdout(sys.stderr):
                executor = stack.enter_context(make_executor(spec))
        with contextlib.redirect_stdout(sys.stderr):
            return make_coordinator(store, observer).start(spec, executor)
