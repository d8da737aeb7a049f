"""Connecting to Ray and reading the cluster: a local cluster started for one bisect or a shared one joined,
the GPUs per step, the custom resources a step asks for, and Ray's messages put on one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import ray

from bisector.vocab.errors import ExecutorError, InputError
from bisector.workers.gpu_leases import GpuLeases, lease_slots
from bisector.workers.gpus import gpus_per_slot, visible_gpus
from bisector.workers.ray_sessions import mark_session, remove_abandoned_sessions, remove_session

CONNECT_PROBE_S = 5.0  # ray.init retries an unreachable address for minutes; a TCP probe fails fast
CONTROL_GROUP = "control"  # the threaded actors' concurrency group for cancels and small questions
BUILDS_GROUP = "builds"  # a slot actor's concurrency group for images built ahead of their steps
CPUS_PER_SLOT = 1
RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


@dataclass(frozen=True)
class RayHold:
    """What `connect` did: whether this process called ray.init (and so must call `release`), and the session
    folder of a local cluster it started (Ray's logs, under /tmp/ray by default: one per cluster, never removed
    by Ray itself; workers/ray_sessions.py)."""

    owned: bool
    local_session: Path | None = None


def connect(address: str | None, workers: int, gpus_per_step: int | None, leases: GpuLeases) -> RayHold:
    """Connect this process to Ray.

    A local cluster started here sees only the GPUs this bisect leased (workers/gpu_leases.py), so two bisects on
    one host never share one."""
    if ray.is_initialized():
        return RayHold(owned=False)
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    if address:
        _probe(address)
        try:
            ray.init(address=address, runtime_env={"py_modules": _project_packages()}, **quiet)
        except Exception as exc:
            hint = "" if os.environ.get("RAY_AUTH_MODE") else " (a cluster with token auth needs RAY_AUTH_MODE=token)"
            raise ExecutorError(f"cannot connect to the Ray cluster at {address}: {one_line(exc)}{hint}") from None
        return RayHold(owned=True)
    gpus = visible_gpus()
    per_slot = gpus_per_slot(gpus, gpus_per_step)
    if per_slot == 0:  # steps without GPUs: the cluster holds none either
        gpus = ()
    fit = min(workers, len(gpus) // per_slot) if per_slot else 0  # more slots than GPUs: Ray places them as GPUs free
    if fit:
        slot_gpus, _ = lease_slots(gpus, fit, gpus_per_step, leases=leases)
        gpus = tuple(gpu for slot in slot_gpus for gpu in slot)
    try:
        with _visible_devices(gpus):
            context = ray.init(
                address="local",  # never join a cluster recorded in /tmp/ray by `ray start`: that takes --ray-address
                num_cpus=max(os.cpu_count() or 1, workers * CPUS_PER_SLOT),
                num_gpus=len(gpus),
                include_dashboard=False,
                **quiet,
            )
    except Exception as exc:
        raise ExecutorError(f"cannot start a local Ray cluster: {one_line(exc)}") from None
    info: dict[str, Any] = getattr(context, "address_info", {})  # a RayContext, typed as its base
    session = info.get("session_dir")
    if not session:
        return RayHold(owned=True)
    with contextlib.suppress(OSError):  # unmarked, the folder is only never swept; the bisect runs on
        mark_session(Path(session))
        remove_abandoned_sessions(Path(session).parent)
    return RayHold(owned=True, local_session=Path(session))


def release(hold: RayHold, keep_logs: bool) -> None:
    """Disconnect a process that `connect` connected. A local cluster's session folder goes with it unless
    keep_logs (a worker was lost: Ray's logs there may say why), so a service starting a cluster per job does
    not fill /tmp."""
    if not hold.owned:
        return
    ray.shutdown()
    if hold.local_session is not None and not keep_logs:
        remove_session(hold.local_session)


@contextlib.contextmanager
def _visible_devices(gpus: tuple[int, ...]) -> Iterator[None]:
    """Start the local cluster seeing exactly these GPUs ($BISECT_GPUS), so Ray hands out their real ids."""
    if not gpus:
        yield
        return
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    try:
        yield
    finally:
        if previous is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous


def _probe(address: str) -> None:
    """Fail in seconds, not minutes, when nothing listens at host:port ("auto" is left to Ray)."""
    target = address.removeprefix("ray://")
    try:
        parts = urlsplit(f"//{target}")
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ExecutorError(f"--ray-address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto") from None
    if host is None or port is None:
        return
    try:
        socket.create_connection((host, port), timeout=CONNECT_PROBE_S).close()
    except OSError as exc:
        raise ExecutorError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def _project_packages() -> list[str]:
    """The packages a remote node's actor imports, shipped so every node runs the coordinator's code."""
    return [str(Path(__file__).parents[1])]  # the bisector package, this folder among its subpackages


def resolve_gpus_per_step(requested: int | None) -> int:
    """The GPUs a step's actor asks for: requested (0: none), or by default (None) one when the cluster has GPUs,
    else none (as for the local executor)."""
    if requested is not None and requested < 0:
        raise InputError(f"--gpus-per-step must be 0 or more (got {requested})")
    if requested is not None:
        return requested
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return 1 if any(node["Alive"] and node["Resources"].get("GPU", 0) >= 1 for node in nodes) else 0


def checked_resources(resources: dict[str, float]) -> dict[str, float]:
    """The --resources of a step, refused when they name CPU/GPU/memory or a non-positive amount."""
    for name, amount in resources.items():
        if not name or name in RESERVED_RESOURCES:
            raise InputError(f"--resources {name}={amount:g}: name a custom resource (GPUs: --gpus-per-step)")
        if amount <= 0:
            raise InputError(f"--resources {name}={amount:g}: the amount must be positive")
    return dict(resources)


def cluster_total() -> dict[str, float]:
    return dict(ray.cluster_resources())  # type: ignore[no-untyped-call]


def describe(resources: dict[str, float]) -> str:
    shown = {k: v for k, v in resources.items() if not k.startswith("node:") and k not in RESERVED_RESOURCES[2:]}
    return ", ".join(f"{name} {amount:g}" for name, amount in sorted(shown.items()) if amount) or "nothing"


def one_line(exc: BaseException, *, last: bool = False) -> str:
    """Ray's messages run over many lines; a task's error ends with the remote exception, others start with it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if last:
        return lines[-1] if lines else type(exc).__name__
    return f"{type(exc).__name__}: {lines[0] if lines else 'no message'}"
