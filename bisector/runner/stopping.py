"""SIGTERM, SIGINT and SIGHUP to a coordinator: stop every test of the bisect, keep what is stored, exit.

`stop_on_signals()` turns the first of those signals into StopRequested, raised in the main thread wherever
the coordinator is. On the way out the executor closes (each worker kills its test's process group), the
steps still running are stored as interrupted (`bisect resume` runs them again), and the CLI prints one
line and exits with 128 + the signal's number. Further signals while it stops are ignored: cleaning up
must not be cut short by the second signal a CI runner or a double Ctrl-C sends.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopRequested(BaseException):
    """A stop signal arrived. A BaseException, so that no `except Exception` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.bisect_id: int | None = None  # set by the coordinator that was running one
        self.interrupted_steps = 0

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, the first stop signal raises StopRequested; later ones are ignored. Outside the main
    thread (where signals cannot be caught) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def handle(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        raise StopRequested(signum)

    previous = {signum: signal.signal(signum, handle) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
