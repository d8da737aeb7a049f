"""gpu-bisect's trace hooks, loaded at interpreter start through PYTHONPATH (see kernel_trace.py, call_trace.py).

With BISECT_CALL_TRACE=FILE and BISECT_TRACE_FUNCTIONS="pkg/mod.py:Qual.name;..." set, each listed function is
wrapped as soon as its module has been imported (whatever imports it), and each distinct (function, arguments,
result) is appended to FILE as one JSON line; the values are summarised (tensors as shape and dtype), and each
process writes at most _MAX_CALL_LINES lines of at most _MAX_TEXT characters a value.

With BISECT_PROBE_DIR=DIR set, every process records the files it opens, the directories it lists, the
programs it starts and its line coverage into DIR (_gpu_bisect_probe.py, for --prune).

With BISECT_KERNEL_TRACE=FILE set, the first `import torch` of the program starts torch.profiler; at exit the
kernel names and launch counts (CUDA kernels when CUDA is available, CPU ops otherwise) are appended to FILE as
one JSON line for this process. A program that never imports torch (or has none) runs as if the hook were not
there, and no failure of the hook reaches the program. Keep this file importable by any Python 3.8+.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

TRACE_ENV = "BISECT_KERNEL_TRACE"
CALL_TRACE_ENV = "BISECT_CALL_TRACE"
TRACE_FUNCTIONS_ENV = "BISECT_TRACE_FUNCTIONS"
PROBE_ENV = "BISECT_PROBE_DIR"
PROBE_COVERAGE_ENV = "BISECT_PROBE_COVERAGE"
_MAX_CALL_LINES = 2000
_MAX_TEXT = 300
_MAX_ITEMS = 8
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
            counts = _kernel_counts_module()
            counts.KernelCounts(counts.LegacyCpuSession(torch), out_file, "cpu", _write).begin()
    except Exception as exc:  # the program must run whatever happens here
        _write(out_file, {"error": f"profiler did not start: {exc!r}"})


def _kernel_counts_module() -> Any:
    """_gpu_bisect_kernel_counts.py, beside this file (this folder leads the program's sys.path)."""
    import importlib

    return importlib.import_module("_gpu_bisect_kernel_counts")


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
            counts = _kernel_counts_module()
            counts.KernelCounts(counts.KinetoCudaSession(), out_file, "cuda", _write).begin()
        except Exception as exc:
            _write(out_file, {"error": f"profiler did not start: {exc!r}"})

    torch.cuda._lazy_init = lazy_init


def _write(out_file: str, record: dict[str, object]) -> None:
    record = {"pid": os.getpid(), "argv": sys.argv[:4], **record}
    with contextlib.suppress(Exception):
        _write_line(out_file, json.dumps(record))


def _write_line(out_file: str, text: str) -> None:
    import fcntl

    with open(out_file, "a", encoding="utf-8") as out:
        fcntl.flock(out, fcntl.LOCK_EX)  # processes of one run append to one file
        out.write(text + "\n")


class _CallTraceWatcher(importlib.abc.MetaPathFinder):
    """Finds the modules that hold traced functions through the other finders and wraps the functions once the
    module has run. A module matches a target path when the path ends with the module's own relative path
    (sglang.srt.ops matches python/sglang/srt/ops.py), so src/ and python/ layouts and installed copies match."""

    def __init__(self, targets: dict[str, list[str]], out_file: str) -> None:
        self.targets = targets  # repository path -> qualified names
        self.out_file = out_file
        self.written: set[str] = set()

    def matching(self, fullname: str) -> list[str]:
        relative = fullname.replace(".", "/")
        endings = ("/" + relative + ".py", "/" + relative + "/__init__.py")
        return [name for path, names in self.targets.items() if ("/" + path).endswith(endings) for name in names]

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        names = self.matching(fullname)
        if not names:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        watcher = self

        def exec_module(module: ModuleType) -> None:
            original(module)
            for name in names:
                with contextlib.suppress(Exception):
                    _wrap(module, name, watcher)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def record(self, function: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        try:
            shown = [_summary(a) for a in args] + [f"{k}={_summary(v)}" for k, v in kwargs.items()]
            line = {"function": function, "args": ", ".join(shown)[:_MAX_TEXT], "result": _summary(result)}
            text = json.dumps(line, sort_keys=True)
            if text in self.written or len(self.written) >= _MAX_CALL_LINES:
                return
            self.written.add(text)
            _write_line(self.out_file, text)
        except Exception:
            return


def _wrap(module: ModuleType, qualname: str, watcher: _CallTraceWatcher) -> None:
    owner: Any = module
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    raw = owner.__dict__.get(parts[-1]) if hasattr(owner, "__dict__") else None
    if raw is None:
        return
    kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    function = raw.__func__ if kind is not None else raw
    if not callable(function) or getattr(function, "__bisect_traced__", False):
        return
    label = f"{module.__name__}:{qualname}"

    def traced(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        shown_args = args[1:] if kind is None and "." in qualname and args else args  # not self
        watcher.record(label, shown_args if kind is not classmethod else args[1:], kwargs, result)
        return result

    with contextlib.suppress(Exception):
        import functools

        traced = functools.wraps(function)(traced)
    traced.__bisect_traced__ = True  # type: ignore[attr-defined]
    setattr(owner, parts[-1], kind(traced) if kind is not None else traced)


def _summary(value: Any, depth: int = 0) -> str:
    """Display text for an argument or result: tensors as Tensor(shape, dtype), containers cut short."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:_MAX_TEXT])
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"Tensor({list(shape)}, {str(dtype).replace('torch.', '', 1)})"
    if depth < 2 and isinstance(value, (list, tuple)):
        items = [_summary(v, depth + 1) for v in value[:_MAX_ITEMS]] + (["..."] if len(value) > _MAX_ITEMS else [])
        return ("[{}]" if isinstance(value, list) else "({})").format(", ".join(items))
    if depth < 2 and isinstance(value, dict):
        pairs = [f"{_summary(k, 2)}: {_summary(v, depth + 1)}" for k, v in list(value.items())[:_MAX_ITEMS]]
        return "{" + ", ".join(pairs) + (", ..." if len(value) > _MAX_ITEMS else "") + "}"
    name = getattr(value, "__qualname__", None) or getattr(getattr(value, "fn", None), "__qualname__", None)
    if isinstance(name, str):
        return f"<{type(value).__name__} {name}>"  # a function or a Triton JITFunction: its name is the choice
    if isinstance(value, type):
        return f"<class {value.__qualname__}>"
    text = repr(value)
    return text[:_MAX_TEXT] if " at 0x" not in text else f"<{type(value).__qualname__}>"


def _targets(spec: str) -> dict[str, list[str]]:
    targets: dict[str, list[str]] = {}
    for item in spec.split(";"):
        path, _, name = item.strip().partition(":")
        if path.endswith(".py") and name:
            targets.setdefault(path.lstrip("./"), []).append(name)
    return targets


def _install() -> None:
    probe_dir = os.environ.get(PROBE_ENV, "")
    if probe_dir:
        import importlib

        importlib.import_module("_gpu_bisect_probe").start(probe_dir, os.environ.get(PROBE_COVERAGE_ENV, ""))
    out_file = os.environ.get(TRACE_ENV, "")
    if out_file and "torch" not in sys.modules:
        sys.meta_path.insert(0, _TorchImportWatcher(os.path.abspath(out_file)))
    calls_file = os.environ.get(CALL_TRACE_ENV, "")
    targets = _targets(os.environ.get(TRACE_FUNCTIONS_ENV, ""))
    if calls_file and targets:
        sys.meta_path.insert(0, _CallTraceWatcher(targets, os.path.abspath(calls_file)))


for _step in (_chain_next_sitecustomize, _install):
    with contextlib.suppress(Exception):  # a broken hook must not break the program it is injected into
        _step()
