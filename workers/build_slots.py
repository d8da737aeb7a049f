"""Host-wide slots for images built ahead: at most $BISECT_BUILD_AHEAD_SLOTS of them build at once on one host, over
all its bisects (a service runs many), so builds no step waits for yet never crowd out the builds and tests that
steps do wait for (a compiler's memory, not only its CPU). A slot is an flock on a file in the host-wide directory
of the GPU leases (workers/gpu_leases.py); the kernel drops it when its holder ends, SIGKILL included.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable

from bisector.workers.gpu_leases import lock_dir, try_lock

SLOTS_VARIABLE = "BISECT_BUILD_AHEAD_SLOTS"
CPUS_PER_SLOT = 16  # the default: one build ahead per 16 CPUs of the host, at least 2
LOOK_S = 0.5  # how often a build waiting for a slot looks again
_first_slots = itertools.count()


def slot_count() -> int:
    """$BISECT_BUILD_AHEAD_SLOTS where it is a positive number, else one per CPUS_PER_SLOT CPUs (at least 2)."""
    with contextlib.suppress(ValueError):
        if (count := int(os.environ.get(SLOTS_VARIABLE, ""))) >= 1:
            return count
    return max(2, (os.cpu_count() or 1) // CPUS_PER_SLOT)


def take_slot(should_stop: Callable[[], bool], waiting: Callable[[], None] = lambda: None) -> int | None:
    """Wait for a free slot and return the descriptor holding it (closing it, or the process's end, frees it), or
    None once should_stop() says so. waiting: called once, when every slot is taken."""
    directory, count, told = lock_dir(), slot_count(), False
    first = next(_first_slots)  # builds started together look from different slots, not all from the first
    while True:
        for index in range(first, first + count):
            if (fd := try_lock(directory / f"build-ahead-{index % count}.lock")) is not None:
                return fd
        if should_stop():
            return None
        if not told:
            waiting()
            told = True
        time.sleep(LOOK_S)
