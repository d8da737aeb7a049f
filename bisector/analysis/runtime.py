"""The traced re-runs after a bisect: which files each run writes, the environment that turns tracing on, and
the diffs of the last good run's traces against the first bad run's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bisector.analysis.dispatch_diff import DispatchDiff, dispatch_diff, read_dispatch_trace
from bisector.analysis.kernel_trace import KernelTraceDiff, kernel_trace_diff, kernel_trace_env, read_kernel_trace

DISPATCH_TRACE_ENV = "KERNELS_DISPATCH_TRACE"  # the structured trace kernels/ writes (see kernels/trace.py)


@dataclass(frozen=True)
class TraceFiles:
    """Where one traced run writes: the dispatch trace always, the kernel trace with --trace-kernels."""

    dispatch: Path
    kernels: Path | None = None

    @classmethod
    def under(cls, directory: Path, label: str, *, trace_kernels: bool) -> TraceFiles:
        """e.g. TraceFiles.under(data_dir / "bisect-7", "first-bad", trace_kernels=True)."""
        kernels = directory / f"{label}.kernels.jsonl" if trace_kernels else None
        return cls(directory / f"{label}.dispatch.jsonl", kernels)

    def reset(self) -> None:
        """Remove what an earlier run left (both traces append) and make the directory."""
        for path in (self.dispatch, self.kernels):
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.unlink(missing_ok=True)

    def env(self, base_env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables to add to the run's environment; base_env is where PYTHONPATH is read from."""
        variables = {DISPATCH_TRACE_ENV: str(self.dispatch.resolve())}
        if self.kernels is not None:
            variables.update(kernel_trace_env(self.kernels.resolve(), base_env))
        return variables


def runtime_diffs(last_good: TraceFiles, first_bad: TraceFiles) -> tuple[DispatchDiff | None, KernelTraceDiff | None]:
    """The dispatch diff (None when neither run wrote a dispatch trace: the program does not dispatch through
    kernels/) and the kernel launch diff (None unless both runs were kernel-traced)."""
    dispatch = None
    if last_good.dispatch.exists() or first_bad.dispatch.exists():
        dispatch = dispatch_diff(read_dispatch_trace(last_good.dispatch), read_dispatch_trace(first_bad.dispatch))
    kernels = None
    if last_good.kernels is not None and first_bad.kernels is not None:
        kernels = kernel_trace_diff(read_kernel_trace(last_good.kernels), read_kernel_trace(first_bad.kernels))
    return dispatch, kernels
