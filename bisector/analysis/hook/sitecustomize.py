"""gpu-bisect's kernel trace hook, loaded at interpreter start through PYTHONPATH (see kernel_trace.py).

With BISECT_KERNEL_TRACE=FILE set, the first `import torch` of the program starts torch.profiler; at exit the
kernel names and launch counts (CUDA kernels when CUDA is available, CPU ops otherwise) are appended to FILE as
one JSON line for this process. A program that never imports torch (or has none) runs as if the hook were not
there, and no failure of the hook reaches the program. Keep this file importable by any Python 3.8+.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

TRACE_ENV = "BISECT_KERNEL_TRACE"
_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))


def _chain_next_sitecustomize() -> None:
    """Run the sitecustomize this file shadows (a distribution's or a virtualenv's), if there is one."""
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HOOK_DIR]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


class _TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Finds torch through the other finders and starts the profiler once torch/__init__ has run."""

    def __init__(self, out_file: str) -> None:
        self.out_file = out_file

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        out_file = self.out_file

        def exec_module(module: ModuleType) -> None:
            original(module)
            _start_profiler(module, out_file)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _start_profiler(torch: Any, out_file: str) -> None:
    try:
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # asks NVML: CUDA itself stays uninitialised
        if torch.cuda.is_available():
            _start_with_cuda(torch, out_file)
        else:
            # The autograd profiler without Kineto records CPU ops and starts in milliseconds, not seconds.
            cpu_profiler = torch.autograd.profiler.profile(use_kineto=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cpu_profiler.__enter__()
            stop = lambda: cpu_profiler.__exit__(None, None, None)  # noqa: E731
            atexit.register(_finish, stop, lambda: cpu_profiler.function_events, out_file, "cpu")
    except Exception as exc:  # the program must run whatever happens here
        _write(out_file, {"error": f"profiler did not start: {exc!r}"})


def _start_with_cuda(torch: Any, out_file: str) -> None:
    """Start the CUDA profiler right after the program's own first CUDA initialisation, not before: CUPTI
    initialises CUDA, and a program that forks workers before touching CUDA must still be able to."""
    original = torch.cuda._lazy_init
    started: list[bool] = []

    def lazy_init() -> None:
        original()
        if started:
            return
        started.append(True)
        torch.cuda._lazy_init = original
        try:
            from torch.profiler import ProfilerActivity, profile

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                profiler = profile(activities=[ProfilerActivity.CUDA])
                profiler.start()
            atexit.register(_finish, profiler.stop, profiler.events, out_file, "cuda")
        except Exception as exc:
            _write(out_file, {"error": f"profiler did not start: {exc!r}"})

    torch.cuda._lazy_init = lazy_init


def _finish(stop: Callable[[], object], events: Callable[[], Any], out_file: str, device: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stop()
        counts: dict[str, int] = {}
        for event in events():
            kind = str(getattr(event, "device_type", "")).rsplit(".", 1)[-1].lower()
            if kind == device:
                counts[event.name] = counts.get(event.name, 0) + 1
        _write(out_file, {"device": device, "kernels": counts})
    except Exception as exc:
        _write(out_file, {"error": f"profiler did not finish: {exc!r}"})


def _write(out_file: str, record: dict[str, object]) -> None:
    record = {"pid": os.getpid(), "argv": sys.argv[:4], **record}
    try:
        import fcntl

        with open(out_file, "a", encoding="utf-8") as out:
            fcntl.flock(out, fcntl.LOCK_EX)  # processes of one run append to one file
            out.write(json.dumps(record) + "\n")
    except Exception:
        return


def _install() -> None:
    out_file = os.environ.get(TRACE_ENV, "")
    if out_file and "torch" not in sys.modules:
        sys.meta_path.insert(0, _TorchImportWatcher(os.path.abspath(out_file)))


for _step in (_chain_next_sitecustomize, _install):
    with contextlib.suppress(Exception):  # a broken hook must not break the program it is injected into
        _step()
