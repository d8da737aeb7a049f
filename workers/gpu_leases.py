"""GPU leases between the bisects of one host: a lock per GPU that dies with its holder.

Each GPU id has a lock file in a host-wide directory ($BISECT_GPU_LOCK_DIR, else /tmp/gpu-bisect-gpus, made mode
1777 so every user's bisects share it). An executor holds an exclusive flock on the file of each GPU its slots
use, for its life; the kernel drops the lock when the holder closes it or dies (SIGKILL included), so no stale
lease outlives a bisect. A second bisect takes the GPUs that are free — fewer slots than asked if it must — and
waits, saying so once, while none is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bisector.workers.gpus import gpus_per_slot, split_gpus

LOCK_DIR_VARIABLE = "BISECT_GPU_LOCK_DIR"
DEFAULT_LOCK_DIR = Path("/tmp/gpu-bisect-gpus")
WAIT_LOOK_S = 0.5  # how often a bisect waiting for a GPU looks again


def lock_dir() -> Path:
    path = Path(os.environ.get(LOCK_DIR_VARIABLE) or DEFAULT_LOCK_DIR)
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # another user's directory: it is theirs to open up
            os.chmod(path, 0o1777)
    return path


def stderr_note(line: str) -> None:
    print(f"gpu-bisect: {line}", file=sys.stderr, flush=True)


def try_lock(path: Path) -> int | None:
    """An exclusive flock on a host-wide lock file (made readable by every user's bisects), or None when another
    process holds it: the descriptor holding it (closing it, or the process's end, frees it)."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    with contextlib.suppress(OSError):  # let other users' bisects open it too
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class GpuLeases:
    """The GPU locks this process holds; release() (or the process's end) frees them."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or lock_dir()
        self._held: dict[int, int] = {}  # GPU id -> the fd holding its lock

    @property
    def held(self) -> tuple[int, ...]:
        return tuple(sorted(self._held))

    def try_take(self, gpu: int) -> bool:
        """Lease one GPU if no other holder has it."""
        if gpu in self._held:
            return True
        fd = try_lock(self.directory / f"gpu-{gpu}.lock")
        if fd is None:
            return False
        self._held[gpu] = fd
        return True

    def release(self, gpus: Sequence[int] | None = None) -> None:
        for gpu in list(self._held) if gpus is None else gpus:
            fd = self._held.pop(gpu, None)
            if fd is not None:
                os.close(fd)


def lease_slots(
    available: tuple[int, ...],
    workers: int,
    gpus_per_step: int | None,
    *,
    note: Callable[[str], None] = stderr_note,
    leases: GpuLeases | None = None,
) -> tuple[list[tuple[int, ...]], GpuLeases]:
    """The GPU ids of up to `workers` slots, leased: as many slots as free GPUs allow (at least one), waiting
    while there are too few free for one. Raises InputError when the host has too few GPUs at all. Slots without
    GPUs (gpus_per_step 0, or a host without any) lease nothing and are all given."""
    wanted = split_gpus(available, workers, gpus_per_step)  # validates against what the host has
    leases = leases or GpuLeases()
    per_slot = gpus_per_slot(available, gpus_per_step)
    if per_slot == 0:
        return wanted, leases
    waiting = False
    while True:
        free = [gpu for gpu in available if leases.try_take(gpu)]
        slots = min(workers, len(free) // per_slot)
        if slots:
            kept = free[: slots * per_slot]
            leases.release([gpu for gpu in free if gpu not in kept])
            if slots < workers:
                busy = ",".join(str(g) for g in available if g not in free)
                note(f"GPUs {busy} are leased by other bisects on this host: running {slots} of {workers} workers")
            return [tuple(kept[i * per_slot : (i + 1) * per_slot]) for i in range(slots)], leases
        leases.release()  # never sit on part of what a slot needs: two bisects could wait for each other
        if not waiting:
            waiting = True
            note(
                f"waiting for a free GPU: {','.join(map(str, available))} are leased by other bisects on this host "
                f"(locks in {leases.directory})"
            )
        time.sleep(WAIT_LOOK_S)


def lease_exactly(gpus: Sequence[int], *, note: Callable[[str], None] = stderr_note) -> GpuLeases:
    """Lease exactly these GPUs, waiting (and saying so once) while another bisect holds any of them."""
    leases = GpuLeases()
    waiting = False
    while not all(leases.try_take(gpu) for gpu in gpus):
        leases.release()
        if not waiting:
            waiting = True
            note(f"waiting for GPUs {','.join(map(str, gpus))}: leased by another bisect on this host")
        time.sleep(WAIT_LOOK_S)
    return leases
