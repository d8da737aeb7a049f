"""The traced re-runs after a bisect: which files each run writes, the environment that turns tracing on, and
the diffs of the last good run's traces against the first bad run's."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bisector.analysis.call_trace import CallTraceDiff, call_trace_diff, call_trace_env, read_call_trace
from bisector.analysis.dispatch_diff import DispatchDiff, dispatch_diff, read_dispatch_trace
from bisector.analysis.kernel_trace import KernelTraceDiff, kernel_trace_diff, kernel_trace_env, read_kernel_trace

DISPATCH_TRACE_ENV = "KERNELS_DISPATCH_TRACE"  # the structured trace kernels/ writes (see kernels/trace.py)


@dataclass(frozen=True)
class TraceFiles:
    """Where one traced run writes: the dispatch trace always, the kernel trace with --trace-kernels, the call
    trace of the functions the static diff names when there are any."""

    dispatch: Path
    kernels: Path | None = None
    calls: Path | None = None
    functions: tuple[str, ...] = ()  # "path.py:Qual.name" to wrap and record

    @classmethod
    def under(cls, directory: Path, label: str, *, trace_kernels: bool, functions: Sequence[str] = ()) -> TraceFiles:
        """e.g. TraceFiles.under(data_dir / "bisect-7", "first-bad", trace_kernels=True)."""
        kernels = directory / f"{label}.kernels.jsonl" if trace_kernels else None
        calls = directory / f"{label}.calls.jsonl" if functions else None
        return cls(directory / f"{label}.dispatch.jsonl", kernels, calls, tuple(functions))

    def reset(self) -> None:
        """Remove what an earlier run left (the traces append) and make the directory."""
        for path in (self.dispatch, self.kernels, self.calls):
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.unlink(missing_ok=True)

    def env(self, base_env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables to add to the run's environment; base_env is where PYTHONPATH is read from."""
        variables = {DISPATCH_TRACE_ENV: str(self.dispatch.resolve())}
        if self.kernels is not None:
            variables.update(kernel_trace_env(self.kernels.resolve(), base_env))
        if self.calls is not None:
            variables.update(
                call_trace_env(
                    self.calls.resolve(),
                    self.functions,
                    {**(os.environ if base_env is None else base_env), **variables},
                )
            )
        return variables


@dataclass(frozen=True)
class RuntimeDiffs:
    dispatch: DispatchDiff | None = None
    kernels: KernelTraceDiff | None = None
    calls: CallTraceDiff | None = None


def runtime_diffs(last_good: TraceFiles, first_bad: TraceFiles) -> RuntimeDiffs:
    """The dispatch diff (None when neither run wrote a dispatch trace: the program does not dispatch through
    kernels/), the kernel launch diff (None unless both runs were kernel-traced) and the call diff of the traced
    functions (None unless functions were traced)."""
    dispatch = None
    if last_good.dispatch.exists() or first_bad.dispatch.exists():
        dispatch = dispatch_diff(read_dispatch_trace(last_good.dispatch), read_dispatch_trace(first_bad.dispatch))
    kernels = None
    if last_good.kernels is not None and first_bad.kernels is not None:
        kernels = kernel_trace_diff(read_kernel_trace(last_good.kernels), read_kernel_trace(first_bad.kernels))
    calls = None
    if last_good.calls is not None and first_bad.calls is not None:
        functions = tuple(dict.fromkeys(last_good.functions + first_bad.functions))
        calls = call_trace_diff(read_call_trace(last_good.calls), read_call_trace(first_bad.calls), functions)
    return RuntimeDiffs(dispatch, kernels, calls)
