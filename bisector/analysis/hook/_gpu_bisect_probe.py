"""The probe of --prune (bisector/runner/prune_probe.py), started by sitecustomize.py in every Python process of a step
when BISECT_PROBE_DIR is set.

Each process appends JSON lines ["kind", value] to its own file in that folder as things happen (a forked child
that ends with os._exit loses nothing): "cwd" and "python" once, then each distinct "read" or "write" (a file
opened), "list" (a directory listed), "dlopen" (a library loaded by ctypes) and "spawn" (a program started, its
argv). Line coverage goes to coverage.py data files in the same folder, saved at exit; coverage.py comes from
the program's own environment, else from the folder in BISECT_PROBE_COVERAGE; without it the process writes
"no-coverage" and its reason. Keep this file importable by any Python 3.8+.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_SPAWN_ARGV = {"subprocess.Popen": 1, "os.exec": 1, "os.posix_spawn": 1, "os.spawn": 2, "os.system": 0}  # arg index


class _Recorder:
    def __init__(self, out_dir: str) -> None:
        name = f"files-{os.getpid()}-{id(self)}.jsonl"
        os.makedirs(out_dir, exist_ok=True)  # on another node than the coordinator's, a folder no one made yet
        self.fd = os.open(os.path.join(out_dir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.out_dir = os.path.abspath(out_dir)
        self.seen: set[tuple[str, str]] = set()
        self.busy = False

    def line(self, kind: str, value: Any) -> None:
        key = (kind, value if isinstance(value, str) else json.dumps(value))
        if key in self.seen:
            return
        self.seen.add(key)
        os.write(self.fd, (json.dumps([kind, value]) + "\n").encode("utf-8", "surrogateescape"))

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            self._audit(event, args)
        except Exception:  # the program must run whatever happens here
            pass
        finally:
            self.busy = False

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (*args, None, None)[:3]
            if isinstance(path, int) or path is None:
                return
            full = _absolute(path)
            if full.startswith(self.out_dir):
                return
            writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
            self.line("write" if writes else "read", full)
        elif event in ("os.listdir", "os.scandir"):
            path = args[0] if args else "."
            if not isinstance(path, int):
                self.line("list", _absolute("." if path is None else path))
        elif event == "ctypes.dlopen" and args and isinstance(args[0], str):
            self.line("dlopen", args[0])
        elif event in _SPAWN_ARGV:
            argv = args[_SPAWN_ARGV[event]]
            if isinstance(argv, (str, bytes, os.PathLike)):
                argv = [argv]
            self.line("spawn", [os.fsdecode(a) if isinstance(a, (str, bytes)) else str(a) for a in list(argv)[:64]])


def _absolute(path: Any) -> str:
    return os.path.abspath(os.fsdecode(path))


def _coverage_module(extra_path: str) -> Any:
    try:
        import coverage

        return coverage
    except ImportError:
        if not extra_path:
            raise
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("coverage", [extra_path])
    if spec is None or spec.loader is None:
        raise ImportError(f"no coverage package in {extra_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["coverage"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["coverage"]
        raise
    return module


def start(out_dir: str, coverage_path: str) -> None:
    recorder = _Recorder(out_dir)
    recorder.line("cwd", os.getcwd())
    recorder.line("python", sys.executable)
    sys.addaudithook(recorder.audit)
    try:
        coverage = _coverage_module(coverage_path)
        measure = coverage.Coverage(
            data_file=os.path.join(out_dir, "coverage"), data_suffix=True, config_file=False, auto_data=False
        )
        measure.start()
    except Exception as exc:
        recorder.line("no-coverage", f"{type(exc).__name__}: {exc}")
        return

    def save() -> None:
        try:
            measure.stop()
            measure.save()
        except Exception as exc:
            recorder.line("no-coverage", f"saving: {type(exc).__name__}: {exc}")

    atexit.register(save)
