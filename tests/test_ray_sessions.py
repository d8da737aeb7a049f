"""A local Ray cluster that a bisect starts leaves no session folder behind (Ray keeps one per cluster under
/tmp/ray and never removes it, so a service starting a cluster per job filled the disk), except when a worker was
lost: then Ray's logs there may say why, and they stay. A coordinator killed outright cannot remove its folder:
the next local cluster gpu-bisect starts does, and never one of a cluster gpu-bisect did not start or that lives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from bisect_helpers import start_cli, wait_for
from synthetic import culprit_history

from bisector.vocab.domain import ErrorKind, StepResult, Verdict
from bisector.vocab.metric import MetricSpec
from bisector.vocab.processes import process_start
from bisector.workers.executor import StepRequest

ray = pytest.importorskip("ray")

from bisector.workers.ray_executor import RayExecutor  # noqa: E402  (needs Ray)
from bisector.workers.ray_sessions import OWNER_MARK, mark_session, remove_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RAY_ROOT = Path("/tmp/ray")  # Ray's default temp root: where a local cluster of gpu-bisect puts its session
PLAIN_RAY = (
    "import logging, ray, time\n"
    "context = ray.init(address='local', num_cpus=1, include_dashboard=False, logging_level=logging.ERROR)\n"
    "print(context.address_info['session_dir'], flush=True)\n"
    "time.sleep(600)\n"
)
MARK = "import sys, pathlib, workers.ray_sessions as s; s.mark_session(pathlib.Path(sys.argv[1]))"

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
    executor = RayExecutor(str(history.path), 1, None, {}, None)
    with executor:
        session = session_of(executor)
        executor.submit(request(history.path, history.shas[0], "bash test.sh", tmp_path / "step.log"))
        assert one_result(executor).verdict is Verdict.GOOD
    assert not session.exists(), "the local cluster's session folder outlived the bisect"
    latest = session.parent / "session_latest"
    assert not (latest.is_symlink() and Path(os.readlink(latest)) == session)


def test_a_lost_worker_keeps_the_session_logs(own_cluster_env: None, tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 3, 2)
    executor = RayExecutor(str(history.path), 1, None, {}, None)
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


def ray_processes_of(session: Path) -> list[str]:
    """The pids of this host's processes whose command line names the session folder (Ray's name it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(session).encode() in (entry / "cmdline").read_bytes():
                pids.append(entry.name)
        except OSError:
            continue
    return pids


def killed_with_its_cluster(process: subprocess.Popen[str], session: Path) -> Path:
    """SIGKILL a process group that started a local Ray cluster; its cluster goes with it, its folder stays."""
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    wait_for(lambda: not ray_processes_of(session), what=f"the Ray processes of {session} to end")
    assert session.is_dir(), "Ray itself removed the session folder: nothing left to test"
    return session


def marked_by(process: subprocess.Popen[str]) -> list[Path]:
    """The session folders marked as this very process's: its pid and its start time (pids are reused: a host's
    pid_max may be 32768), not Ray's `session_latest` link to one of them."""
    owner = (process.pid, process_start(process.pid))
    sessions = []
    for mark in RAY_ROOT.glob(f"session_*/{OWNER_MARK}"):
        if mark.parent.is_symlink():
            continue
        try:
            marked = json.loads(mark.read_text())
            if (marked["pid"], marked["started"]) == owner:
                sessions.append(mark.parent)
        except (OSError, ValueError, KeyError):
            continue
    return sessions


def test_the_next_local_cluster_removes_a_killed_coordinators_session_and_no_other(
    own_cluster_env: None, tmp_path: Path
) -> None:
    history = culprit_history(tmp_path / "repo", 40, 23)
    plain = subprocess.Popen([sys.executable, "-c", PLAIN_RAY], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)  # fmt: skip
    assert plain.stdout is not None
    not_ours = killed_with_its_cluster(plain, Path(plain.stdout.readline().strip()))

    coordinator = start_cli(
        "start", "--repo", str(history.path), "--good", history.shas[0], "--bad", "main", "--run", "bash test.sh",
        "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8", "--executor", "ray", db=tmp_path / "b.db",
    )  # fmt: skip
    try:
        wait_for(lambda: bool(marked_by(coordinator)) or coordinator.poll() is not None, what="its local cluster")
        (abandoned,) = marked_by(coordinator)
    except BaseException:
        os.killpg(coordinator.pid, signal.SIGKILL)  # not left running into the next test
        coordinator.communicate()
        raise
    killed_with_its_cluster(coordinator, abandoned)

    still_running = RAY_ROOT / f"session_gpu-bisect-test-{uuid.uuid4().hex}"  # owner gone, a process still in it
    alive_owner = RAY_ROOT / f"session_gpu-bisect-test-{uuid.uuid4().hex}"  # owner alive (this test)
    for session in (still_running, alive_owner):
        session.mkdir(parents=True)
    mark_session(alive_owner)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", MARK, str(still_running)], env=env, check=True)  # then its owner ends
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(still_running)])
    try:
        executor = RayExecutor(str(history.path), 1, None, {}, None)
        with executor:
            session = session_of(executor)  # its own folder, marked: its owner lives
            assert (session / OWNER_MARK).is_file()
            assert not abandoned.exists(), "the killed coordinator's session folder outlived the next cluster start"
            assert not_ours.is_dir(), "a session folder of a cluster gpu-bisect did not start was removed"
            assert still_running.is_dir(), "a session folder a process still names was removed"
            assert alive_owner.is_dir(), "the session folder of a live owner was removed"
    finally:
        holder.kill()
        holder.wait()
        for session in (not_ours, still_running, alive_owner, abandoned):
            remove_session(session)
