"""A local Ray cluster that a bisect starts leaves no session folder behind (Ray keeps one per cluster under
/tmp/ray and never removes it, so a service starting a cluster per job filled the disk), except when a worker was
lost: then Ray's logs there may say why, and they stay."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bisector.synthetic import culprit_history
from vocab.domain import ErrorKind, StepResult, Verdict
from vocab.metric import MetricSpec
from workers.executor import StepRequest

ray = pytest.importorskip("ray")

from workers.ray_cluster import remove_session  # noqa: E402  (needs Ray)
from workers.ray_executor import RayExecutor  # noqa: E402  (needs Ray)

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray")]  # one local Ray cluster at a time

STEP_LIMIT_S = 300.0  # only against a hang


@pytest.fixture
def own_cluster_env(tmp_path: Path) -> Iterator[None]:
    """No cluster joined already: the executor starts (and owns) a local one."""
    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("BISECT_CACHE_DIR", str(tmp_path / "cache"))
        env.setenv("BISECT_DATA_DIR", str(tmp_path / "data"))
        yield


def session_of(executor: RayExecutor) -> Path:
    session = executor.local_session()
    assert session is not None, "the executor started no local cluster of its own"
    assert session.is_dir()
    return session


def request(repo: Path, sha: str, command: str, log: Path) -> StepRequest:
    return StepRequest(step_id=1, bisect_id=1, sha=sha, attempt=1, repo=str(repo), run_cmd=command,
                       metric=MetricSpec(), log_path=str(log), timeout_s=120)  # fmt: skip


def one_result(executor: RayExecutor) -> StepResult:
    results: list[StepResult] = []
    deadline = time.monotonic() + STEP_LIMIT_S
    while not results and time.monotonic() < deadline:
        results += executor.poll(0.2)
    (result,) = results
    return result


def test_a_clean_close_removes_the_clusters_session_folder(own_cluster_env: None, tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 3, 2)
    executor = RayExecutor(str(history.path), 1, 0, {}, None)
    with executor:
        session = session_of(executor)
        executor.submit(request(history.path, history.shas[0], "bash test.sh", tmp_path / "step.log"))
        assert one_result(executor).verdict is Verdict.GOOD
    assert not session.exists(), "the local cluster's session folder outlived the bisect"
    latest = session.parent / "session_latest"
    assert not (latest.is_symlink() and Path(os.readlink(latest)) == session)


def test_a_lost_worker_keeps_the_session_logs(own_cluster_env: None, tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 3, 2)
    executor = RayExecutor(str(history.path), 1, 0, {}, None)
    with executor:
        session = session_of(executor)
        victim = executor.worker_pids()["ray-0"]
        executor.submit(request(history.path, history.shas[0], "sleep 60", tmp_path / "step.log"))
        os.kill(victim, signal.SIGKILL)
        assert one_result(executor).error_kind is ErrorKind.WORKER_LOST
    try:
        assert (session / "logs").is_dir(), "a lost worker's Ray logs were removed"
    finally:
        remove_session(session)
