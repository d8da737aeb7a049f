"""Helpers of the worker reliability tests (imported by name: this directory is on sys.path)."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from synthetic import SyntheticHistory

from bisector.vocab.domain import StepResult
from bisector.vocab.metric import MetricSpec
from bisector.workers.executor import Executor, StepRequest

SAFETY_TIMEOUT_S = 300.0  # only against a hang: no test depends on how fast a step runs


def step_request(
    history: SyntheticHistory,
    step_id: int,
    position: int,
    run: str,
    logs: Path,
    *,
    metric: MetricSpec | None = None,
    timeout_s: float = 120.0,
) -> StepRequest:
    return StepRequest(
        step_id=step_id, bisect_id=1, sha=history.shas[position], attempt=1, repo=str(history.path), run_cmd=run,
        metric=metric or MetricSpec(), log_path=str(logs / f"step-{step_id}.log"), timeout_s=timeout_s,
    )  # fmt: skip


def results_of(executor: Executor, count: int) -> list[StepResult]:
    results: list[StepResult] = []
    deadline = time.monotonic() + SAFETY_TIMEOUT_S
    while len(results) < count and time.monotonic() < deadline:
        results += executor.poll(0.5)
    assert len(results) == count, f"only {len(results)} of {count} steps came back"
    return results


def run_one(executor: Executor, request: StepRequest) -> StepResult:
    executor.submit(request)
    (result,) = results_of(executor, 1)
    return result


# A stand-in coordinator: two local workers, each running a test that writes its pid and sleeps. It dies of the
# signal itself (default dispositions), as a coordinator without handlers would.
DRIVER = textwrap.dedent(
    """
    import signal, sys, time
    from pathlib import Path
    from bisector.vocab.metric import MetricSpec
    from bisector.workers.executor import StepRequest
    from bisector.workers.local import LocalExecutor

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    repo, sha, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    executor = LocalExecutor(repo, workers=2)
    for step_id in (1, 2):
        executor.submit(StepRequest(
            step_id=step_id, bisect_id=1, sha=sha, attempt=1, repo=repo, metric=MetricSpec(), timeout_s=3600,
            run_cmd=f"echo $$ > {out}/test-{step_id}.tmp && mv {out}/test-{step_id}.tmp {out}/test-{step_id} && "
            "exec sleep 1000",
            log_path=str(out / f"step-{step_id}.log"),
        ))
    (out / "workers").write_text(" ".join(str(pid) for pid in executor.worker_pids().values()))
    while True:
        executor.poll(1.0)
    """
)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
