"""Kernel (or CPU op) counts for the kernel trace, with memory bounded by one drain period rather than by the run.

Loaded by sitecustomize.py (this folder leads the traced program's PYTHONPATH, hence the unlikely module name) once
the program imports torch. A profiler keeps every event until it stops, and only the thread that started it can
stop it (Kineto keeps its state per thread). So every $BISECT_KERNEL_TRACE_DRAIN_S seconds (default 2; 0: never)
the profiler is stopped, its events are added up and dropped, and a new one starts:
- profiling begun on the main thread (the usual case) is drained there, by the handler of a real-time signal that a
  timer thread sends; the main thread launches nothing meanwhile, so none of its launches is missed;
- CUDA profiling begun on another thread (a program whose first CUDA call is off the main thread) gets a thread of
  its own that starts, drains and finally stops the profiler; CUPTI sees every thread's kernels, bar the few that
  other threads launch in the instant between two profilers;
- CPU ops (no CUDA) are recorded only on the thread that started the profiler: begun off the main thread, they are
  not traced, and the trace says so.
Where the signal is taken by the program or real-time signals are missing, one profiler runs to the end. Keep this
file importable by any Python 3.8+.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import warnings
from collections.abc import Callable
from typing import Any

DRAIN_ENV = "BISECT_KERNEL_TRACE_DRAIN_S"
DEFAULT_DRAIN_S = 2.0
FINISH_WAIT_S = 300.0  # how long the exit waits for the profiling thread's last count (only against a hang)
_SIGNAL_OFFSET = 3  # SIGRTMIN + 3: clear of the few real-time signals that runtimes use (glibc's own, below it)


class KinetoCudaSession:
    """torch.profiler recording CUDA activity (kernels), counted from Kineto's raw results: building the
    profiler's FunctionEvents costs several KB a kernel (GBs for a minute of decode)."""

    sees_every_thread = True

    def start(self) -> Any:
        from torch.profiler import ProfilerActivity, profile

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = profile(activities=[ProfilerActivity.CUDA])
            session.start()
        return session

    def stop(self, session: Any) -> list[str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session.stop()
        events = session.profiler.kineto_results.events()
        names = [event.name() for event in events if _device_kind(event.device_type()) == "cuda"]
        session.profiler = None  # the results hold every event; dropping them frees the memory
        return names


class LegacyCpuSession:
    """The autograd profiler without Kineto: records CPU ops and starts in milliseconds, not seconds."""

    sees_every_thread = False

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def start(self) -> Any:
        session = self.torch.autograd.profiler.profile(use_kineto=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session.__enter__()
        return session

    def stop(self, session: Any) -> list[str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session.__exit__(None, None, None)
        results = getattr(session, "kineto_results", None)
        if results is not None:
            names = [event.name() for event in results.events() if _device_kind(event.device_type()) == "cpu"]
        else:
            names = [event.name for event in session.function_events if _device_kind(event.device_type) == "cpu"]
        session.kineto_results = session._function_events = None  # the events: dropping them frees the memory
        return names


def _device_kind(device_type: Any) -> str:
    return str(device_type).rsplit(".", 1)[-1].lower()


class KernelCounts:
    """One process's counts: begin() where the program starts profiling, written out at exit."""

    def __init__(
        self, backend: Any, out_file: str, device: str, write: Callable[[str, dict[str, object]], None]
    ) -> None:
        self.backend = backend
        self.out_file = out_file
        self.device = device
        self.write = write
        self.counts: dict[str, int] = {}
        self.drains = 0
        self.session: Any = None
        self.busy = False
        self.signal_number: int | None = None
        self.stopping = threading.Event()
        self.helper: threading.Thread | None = None  # the timer (main-thread profiling) or the profiling thread
        self.owned_elsewhere = False

    def begin(self) -> None:
        period = _drain_period()
        if threading.current_thread() is not threading.main_thread():
            if not self.backend.sees_every_thread:
                self.write(self.out_file, {"error": "torch was first imported off the main thread: CPU ops not traced"})
                return
            self._begin_on_own_thread(period)
        else:
            self.session = self.backend.start()
            with contextlib.suppress(Exception):
                self._drain_by_signal(period)
        atexit.register(self.finish)

    def _begin_on_own_thread(self, period: float) -> None:
        started = threading.Event()

        def profile() -> None:
            try:
                self.session = self.backend.start()
            except Exception as exc:
                self.write(self.out_file, {"error": f"profiler did not start: {exc!r}"})
                return
            finally:
                started.set()
            while not self.stopping.wait(period if period > 0 else None):
                self._restart()
            if self.session is not None:
                self._drain()

        self.owned_elsewhere = True
        self.helper = threading.Thread(target=profile, name="bisect-kernel-trace", daemon=True)
        self.helper.start()
        started.wait()  # the launches that follow the program's first CUDA call are counted

    def _drain_by_signal(self, period: float) -> None:
        number = getattr(signal, "SIGRTMIN", None)
        if period <= 0 or number is None:
            return
        number += _SIGNAL_OFFSET
        if signal.getsignal(number) != signal.SIG_DFL:
            return
        signal.signal(number, self._on_signal)
        signal.siginterrupt(number, False)  # restart the program's interrupted system calls
        self.signal_number = number
        main = threading.main_thread().ident
        self.helper = threading.Thread(
            target=self._tick, args=(period, number, main), name="bisect-kernel-trace", daemon=True
        )
        self.helper.start()

    def _tick(self, period: float, number: int, main: int | None) -> None:
        while not self.stopping.wait(period):
            if main is None or signal.getsignal(number) != self._on_signal:
                return  # the program took the signal over: never send it theirs
            signal.pthread_kill(main, number)

    def _on_signal(self, _number: int, _frame: Any) -> None:
        if not self.busy:  # else a signal that came while the last drain ran
            self.busy = True
            try:
                self._restart()
            finally:
                self.busy = False

    def _restart(self) -> None:
        if self.session is None:
            return
        try:
            self._drain()
            self.session = self.backend.start()
            self.drains += 1
        except Exception as exc:
            self.write(self.out_file, {"error": f"profiler did not restart: {exc!r}"})

    def _drain(self) -> None:
        session, self.session = self.session, None
        for name in self.backend.stop(session):
            self.counts[name] = self.counts.get(name, 0) + 1
        _release_freed_memory()

    def finish(self) -> None:
        self.stopping.set()
        if self.helper is not None:
            self.helper.join(timeout=FINISH_WAIT_S if self.owned_elsewhere else 5)
        if self.signal_number is not None:
            with contextlib.suppress(Exception):
                signal.signal(self.signal_number, signal.SIG_IGN)  # one still on its way must not end the program
        try:
            if self.owned_elsewhere and self.helper is not None and self.helper.is_alive():
                raise TimeoutError(f"the profiling thread's last count took over {FINISH_WAIT_S:g}s")
            if self.session is not None and not self.owned_elsewhere:
                self._drain()
            self.write(self.out_file, {"device": self.device, "kernels": self.counts, "drains": self.drains})
        except Exception as exc:
            self.write(self.out_file, {"error": f"profiler did not finish: {exc!r}"})


def _drain_period() -> float:
    try:
        return float(os.environ.get(DRAIN_ENV) or DEFAULT_DRAIN_S)
    except ValueError:
        return DEFAULT_DRAIN_S


def _release_freed_memory() -> None:
    """Give glibc's freed arenas back to the system (without it the process keeps the peak of every drain)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
