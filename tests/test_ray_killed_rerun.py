"""A `bisect run-at --bisect ID --executor ray` killed with its process group (SIGKILL) while its step's test runs:
the test, in a session of its own, ends with the step's Ray actor, whose reaper ends the groups it announced, on a
local cluster the rerun started (killed with it) and on a cluster it joined (which kills the actors of a driver that
died) alike, on a host where no step cgroup (nor its sweep) can end it; the next command stores the step as
interrupted. Real Ray clusters, real CLI processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bisect_helpers import cli_env, run_cli, wait_for
from cgroup_helpers import Wrap, no_step_cgroups
from test_rerun_cancel import DIED, HeldTest, found_bisect, held, rerun_steps, wait_for_the_reruns_test

ray = pytest.importorskip("ray")

from bisector.workers.ray_sessions import remove_session  # noqa: E402  (needs Ray)

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray")]  # one local Ray cluster at a time

__all__ = ["held", "no_step_cgroups"]  # fixtures, used by name
TEST_END_LIMIT_S = 300.0  # only against a hang
CLUSTER = """
import logging, sys, time
from ray import cluster_utils
cluster = cluster_utils.Cluster(
    initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False}
)
print(cluster.address, cluster.head_node.get_session_dir_path(), flush=True)
time.sleep(3600)
"""


@pytest.fixture
def joined_cluster(no_step_cgroups: Wrap, tmp_path: Path) -> Iterator[str]:
    """The address of a running Ray cluster (one head node, in no_step_cgroups' cgroup) that a rerun joins."""
    head = subprocess.Popen(
        no_step_cgroups([sys.executable, "-c", CLUSTER]), env=cli_env(), stdout=subprocess.PIPE, text=True,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    assert head.stdout is not None
    address, session = head.stdout.readline().split()
    try:
        yield address
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.communicate()
        with contextlib.suppress(OSError):
            remove_session(Path(session))


def assert_a_killed_ray_rerun_leaves_no_test_running(
    tmp_path: Path, held: HeldTest, no_step_cgroups: Wrap, *ray_args: str
) -> None:
    history, db = found_bisect(tmp_path, held)
    held.hold.touch()  # the rerun's test waits until the end of the test
    args = ["run-at", "--bisect", "1", history.shas[6], "--executor", "ray", *ray_args]
    rerun = subprocess.Popen(
        no_step_cgroups([sys.executable, "-m", "bisector", *args]), env=cli_env(db), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_the_reruns_test(db, held, rerun)
    finally:
        os.killpg(rerun.pid, signal.SIGKILL)  # the rerun's own process group (a local cluster it started with it)
        rerun.communicate()
    wait_for(lambda: not held.processes(), timeout_s=TEST_END_LIMIT_S, what="the killed rerun's test to end")
    done = run_cli("status", "1", db=db)
    assert done.returncode == 0, done.stderr
    assert [(verdict, detail) for _, verdict, detail in rerun_steps(db)] == [(DIED[0], DIED[2])]


def test_a_killed_ray_rerun_s_test_ends_with_its_local_cluster(
    tmp_path: Path, held: HeldTest, no_step_cgroups: Wrap
) -> None:
    assert_a_killed_ray_rerun_leaves_no_test_running(tmp_path, held, no_step_cgroups)


def test_a_killed_ray_rerun_s_test_ends_on_the_cluster_it_joined(
    tmp_path: Path, held: HeldTest, no_step_cgroups: Wrap, joined_cluster: str
) -> None:
    assert_a_killed_ray_rerun_leaves_no_test_running(tmp_path, held, no_step_cgroups, "--ray-address", joined_cluster)
