"""GPUs per step: how a host's GPUs ($BISECT_GPUS pretends a host has them) are split into slots, and
`--gpus-per-step 0`, steps without a GPU on any host and any executor."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from bisect_helpers import cli_env, run_cli
from synthetic import culprit_history

from bisector.core.spec import BisectSpec, CommitTest, ExecutorSpec
from bisector.runner.pipeline import step_request
from bisector.runner.stopping import StopRequested
from bisector.vocab.errors import InputError
from bisector.workers.gpu_leases import GpuLeases, lease_slots
from bisector.workers.gpus import split_gpus
from bisector.workers.inprocess import InProcessExecutor
from bisector.workers.pool import SlotPool

# What each step saw, one line per step: the value of CUDA_VISIBLE_DEVICES, or "unset".
RECORD_GPUS_ONLY = 'echo "cvd=[${CUDA_VISIBLE_DEVICES-unset}]"'
RECORD_GPUS = 'printf "%s\\n" "${{CUDA_VISIBLE_DEVICES-unset}}" >> {record}; bash test.sh'


def test_0_gpus_per_step_gives_every_slot_none_whatever_the_host_has():
    assert split_gpus((0,), 8, 0) == [()] * 8
    assert split_gpus((), 2, 0) == [()] * 2


def test_by_default_a_slot_gets_one_gpu_where_the_host_has_gpus_else_none():
    assert split_gpus((0, 1), 2, None) == [(0,), (1,)]
    assert split_gpus((), 3, None) == [()] * 3
    with pytest.raises(InputError, match="8 workers x 1 GPUs per step need 8 GPUs; this host shows 1"):
        split_gpus((0,), 8, None)
    with pytest.raises(InputError, match="--gpus-per-step 2 but this host shows no GPU"):
        split_gpus((), 1, 2)


def test_slots_without_gpus_lease_none_so_another_bisect_holding_the_gpus_never_blocks_them():
    other_bisect = GpuLeases()
    assert other_bisect.try_take(0)
    try:
        slots, leases = lease_slots((0,), 4, 0, note=pytest.fail)
        assert (slots, leases.held) == ([()] * 4, ())
    finally:
        other_bisect.release()


@pytest.mark.parametrize("executor", ["local", "inprocess"])
def test_workers_4_gpus_per_step_0_runs_on_a_1_gpu_host_and_each_step_sees_no_gpu(tmp_path: Path, executor: str):
    history = culprit_history(tmp_path / "repo", 12, 7)
    record = tmp_path / "seen.txt"
    args = ["start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main", "--format", "json",
            "--executor", executor, "--run", RECORD_GPUS.format(record=record)]  # fmt: skip
    env = cli_env(tmp_path / "b.db", BISECT_GPUS="0")
    done = run_cli(*args, "--workers", "4", "--gpus-per-step", "0", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == history.shas[7]
    seen = record.read_text().splitlines()  # every step that ran its test; one cancelled before may not have
    ran = [step for step in report["steps"] if step["verdict"] != "cancelled"]
    assert 2 <= len(ran) <= len(seen) <= len(report["steps"])
    assert set(seen) == {""}  # set, and empty: no GPU
    assert all(step["gpus"] == [] for step in report["steps"]), report["steps"]

    refused = run_cli(*args, "--workers", "4", env=env)  # left out: one GPU per step, and this host has one
    assert refused.returncode == 2
    assert "4 workers x 1 GPUs per step need 4 GPUs; this host shows 1" in refused.stderr


def test_a_shared_pool_runs_a_step_of_0_gpus_on_a_gpu_slot_without_the_gpu(tmp_path: Path):
    """`bisect serve`'s pool leases its slots' GPUs once for every job; a job of --gpus-per-step 0 sees none."""
    repo = culprit_history(tmp_path / "repo", 4, 2).path
    pool = SlotPool(InProcessExecutor(str(repo), 1, [(0,)]), stop_error=lambda: StopRequested(signal.SIGTERM))
    seen = {}
    try:
        for bisect_id, gpus_per_step in ((1, 0), (2, None)):
            spec = BisectSpec(repo=str(repo), good="HEAD~3", bad="HEAD", test=CommitTest(run=RECORD_GPUS_ONLY),
                              executor=ExecutorSpec(gpus_per_step=gpus_per_step))  # fmt: skip
            view = pool.view(bisect_id)
            view.submit(step_request(spec,
                bisect_id=bisect_id, step_id=bisect_id, sha="HEAD", attempt=1, repo=str(repo),
                metric=spec.metric_spec(), log_path=str(tmp_path / f"step-{bisect_id}.log"),
            ))  # fmt: skip
            results = []
            while not results:
                results = view.poll(0.2)
            view.close()
            seen[gpus_per_step] = Path(results[0].log_path).read_text().splitlines()[-1]
    finally:
        pool.close()
    assert seen == {0: "cvd=[]", None: "cvd=[0]"}
