"""Two bisects on one host never use the same GPU at once: the second takes the free GPUs, or waits and says so."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from synthetic import culprit_history
from worker_steps import SAFETY_TIMEOUT_S, results_of, step_request

from bisector.workers.gpu_leases import GpuLeases
from bisector.workers.local import LocalExecutor

ROOT = Path(__file__).resolve().parents[2]

# One bisect's executor: two one-GPU workers; each step marks its GPU as in use (mkdir fails if another step
# holds it), then waits for the test's go.
DRIVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from bisector.vocab.metric import MetricSpec
    from bisector.workers.executor import StepRequest
    from bisector.workers.local import LocalExecutor

    repo, sha, out, name = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    held = out / "in-use"
    run = (
        f"mkdir {held}/gpu-$CUDA_VISIBLE_DEVICES || echo {name} >> {out}/overlaps; "
        f"touch {out}/{name}-running-$CUDA_VISIBLE_DEVICES; "
        f"while [ ! -e {out}/go ]; do sleep 0.05; done; rmdir {held}/gpu-$CUDA_VISIBLE_DEVICES"
    )
    with LocalExecutor(repo, workers=2, gpus_per_step=1) as executor:
        for step_id in range(1, executor.slots + 1):
            executor.submit(StepRequest(
                step_id=step_id, bisect_id=1, sha=sha, attempt=1, repo=repo, run_cmd=run, metric=MetricSpec(),
                log_path=str(out / f"{name}-step-{step_id}.log"), timeout_s=3600,
            ))
        done = 0
        while done < executor.slots:
            done += len(executor.poll(1.0))
    """
)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + SAFETY_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


def test_two_bisects_never_share_a_gpu_the_second_waits_and_says_so(tmp_path: Path):
    history = culprit_history(tmp_path / "repo", 2, 1)
    out = tmp_path / "out"
    (out / "in-use").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECT_GPUS": "0,1"}  # the lock dir: conftest's, of this test

    def start(name: str) -> subprocess.Popen[bytes]:
        with (out / f"{name}.stderr").open("wb") as stderr:
            return subprocess.Popen(
                [sys.executable, "-c", DRIVER, str(history.path), history.shas[0], str(out), name],
                env=env, stderr=stderr,
            )  # fmt: skip

    first = start("first")
    wait_until(lambda: all((out / f"first-running-{gpu}").exists() for gpu in (0, 1)), "the first bisect's steps")
    second = start("second")
    wait_until(
        lambda: (
            b"waiting for a free GPU" in (out / "second.stderr").read_bytes()
            or any((out / f"second-running-{gpu}").exists() for gpu in (0, 1))
        ),
        "the second bisect to wait or to start",
    )
    (out / "go").touch()
    assert first.wait(timeout=SAFETY_TIMEOUT_S) == 0
    assert second.wait(timeout=SAFETY_TIMEOUT_S) == 0
    assert not (out / "overlaps").exists(), f"GPUs used by two bisects at once: {(out / 'overlaps').read_text()}"
    stderr = (out / "second.stderr").read_text()
    assert stderr.startswith("gpu-bisect: waiting for a free GPU: 0,1 are leased by other bisects on this host")
    assert len(stderr.splitlines()) == 1  # said once
    assert all((out / f"second-running-{gpu}").exists() for gpu in (0, 1))  # then it ran on both


def test_a_bisect_takes_the_free_gpus_and_says_which_are_leased(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("BISECT_GPUS", "0,1,2")
    history = culprit_history(tmp_path / "repo", 2, 1)
    other = GpuLeases()  # another bisect's lease on GPU 1 (a lock of its own, as another process would hold)
    assert other.try_take(1)
    try:
        with LocalExecutor(str(history.path), workers=3, gpus_per_step=1) as executor:
            assert executor.slots == 2
            gpus = [executor.submit(step_request(history, i, 0, "true", tmp_path / "logs")).gpus for i in (1, 2)]
            results_of(executor, 2)
        assert sorted(gpus) == [(0,), (2,)]
        assert other.try_take(0)  # released at close
    finally:
        other.release()
    assert capsys.readouterr().err == (
        "gpu-bisect: GPUs 1 are leased by other bisects on this host: running 2 of 3 workers\n"
    )
