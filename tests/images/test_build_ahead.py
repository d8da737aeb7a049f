"""Images built ahead of their steps (workers/build_ahead.py): real builds, a real `bisect start`, real kills."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from bisect_helpers import processes_with, run_cli, start_cli, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from image_repo import BUILD_CMD, METRIC, ImageRepo, commit, git, make_image_repo

from bisector.vocab.patches import Patch, PatchKind
from bisector.workers.build_ahead import AheadStatus, BuildAhead, BuildAheadJob, env_changes, with_changes
from bisector.workers.build_ahead_child import BuildServer, SharedEviction
from bisector.workers.build_slots import take_slot
from bisector.workers.executor import StepRequest
from bisector.workers.images.cache import ImageCache, ImageStatus, images_root
from bisector.workers.images.key import ImageRecipe, image_key
from bisector.workers.process import CancelSignal

pytestmark = pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)")


# The first probe's test waits until both builds ahead of it have begun (the first probe's own build and theirs:
# 3 lines in the counter the build script appends to), so the next probe always finds its image built or under way
# whatever the host's load; the bound is a safety net against a hang, never a speed target.
WAIT_FOR_BUILDS_AHEAD = 'for i in $(seq 1800); do [ "$(wc -l < "$BUILD_COUNTER")" -ge 3 ] && break; sleep 0.1; done'


def _start_args(repo: ImageRepo, counter: Path) -> list[str]:
    """`bisect start` over the whole image repository on venv images, its builds counted in counter."""
    return [
        "start", "--repo", str(repo.path), "--good", repo.shas[0], "--bad", repo.shas[-1], "--build", BUILD_CMD,
        "--run", f"{WAIT_FOR_BUILDS_AHEAD}; bash test.sh", "--metric", r"metric: ([0-9.]+)", "--expect", ">= 8",
        "--image", "venv", "--no-explain", "--env", f"BUILD_COUNTER={counter}",
    ]  # fmt: skip


def still_needed(sha: str) -> bool:
    """The search may still probe every commit."""
    return True


def _request(repo: Path, sha: str, tmp: Path, **env: str) -> StepRequest:
    """A step on the whole tree's image (every commit its own image)."""
    return StepRequest(
        step_id=0, bisect_id=1, sha=sha, attempt=1, repo=str(repo), run_cmd="true", build_cmd=BUILD_CMD,
        metric=METRIC, log_path=str(tmp / "logs" / f"build-ahead-{sha[:12]}.log"), timeout_s=900, env=env,
        image=ImageRecipe("venv"),
    )  # fmt: skip


def _manifests() -> dict[str, str]:
    """Image id -> status of every image in this test's cache."""
    return {p.parent.name: json.loads(p.read_text())["status"] for p in images_root().glob("*/manifest.json")}


def test_a_bisect_on_images_tests_the_next_probes_on_images_built_while_the_probe_before_ran(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", (10,) * 11 + (5,) * 5)
    counter = tmp_path / "builds"
    done = run_cli(*_start_args(repo, counter), "--env", "BUILD_SLEEP_S=1", "--format", "json", db=tmp_path / "b.db")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_bad"]["sha"] == repo.shas[11]
    steps = report["steps"]
    built_by_steps = [s for s in steps if s["image"]["source"] == "built"]
    tested_on_ready_images = [s for s in steps if s["image"]["source"] == "cache"]
    assert steps[0] in built_by_steps  # nothing ran before the first probe
    assert tested_on_ready_images, steps
    built = [line.split()[-1] for line in counter.read_text().splitlines()]
    assert len(built) > len(built_by_steps)  # the commits built ahead: each probe's image, and some never tested
    assert len(built) == len(set(built))  # each commit built once
    assert "images built ahead of their steps this run:" in done.stderr
    ahead = report["built_ahead"]  # stored with the bisect: `bisect show` says it later
    assert len(ahead) == len(set(ahead)) >= len(tested_on_ready_images)
    assert {s["sha"] for s in tested_on_ready_images} <= set(ahead)
    assert repo.shas[0] not in ahead  # an endpoint's outcome is never guessed
    shown = run_cli("show", "1", db=tmp_path / "b.db")
    tested = [s for s in tested_on_ready_images if s["verdict"] in ("good", "bad", "measured", "skip")]
    assert f"{len(ahead)} image(s) built ahead of their steps, {len(tested)} of them then tested" in (
        " ".join(shown.stdout.split())
    )
    assert set(_manifests().values()) <= {ImageStatus.READY.value}  # nothing left half built
    listed = run_cli("images", "ls", "--format", "json", db=tmp_path / "b.db")
    assert len(json.loads(listed.stdout)) == len(_manifests()), listed.stdout  # those never tested too


def _long_build(tmp_path: Path, sleep: str) -> tuple[BuildAhead, str]:
    """A pool building one commit's image whose build sleeps `sleep` seconds (a number no other test uses, so
    that its process can be told apart), once the build's sleep runs; returns the pool and the commit."""
    repo = make_image_repo(tmp_path / "repo", (10, 10))
    ahead = BuildAhead(1)
    ahead.want([_request(repo.path, repo.shas[1], tmp_path, BUILD_SLEEP_S=sleep)], still_needed)
    wait_for(lambda: bool(processes_with(f"sleep {sleep}")), what="the build's sleep")
    return ahead, repo.shas[1]


def test_a_build_whose_commit_the_search_no_longer_needs_is_stopped_and_leaves_no_image(tmp_path: Path):
    ahead, _ = _long_build(tmp_path, "611")
    ahead.want([], relevant=lambda sha: False)  # the search moved on: its commit is out of the range
    wait_for(lambda: bool(ahead.reap()), what="the stopped build to end")  # stopped by want(), not by close()
    assert [o.status for o in ahead.outcomes.values()] == [AheadStatus.CANCELLED]
    assert not processes_with("sleep 611")
    assert ImageStatus.READY.value not in _manifests().values()
    ahead.close()


def test_a_coordinator_killed_mid_build_takes_the_build_with_it(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", (10, 10))
    counter = tmp_path / "builds"
    request = _request(repo.path, repo.shas[1], tmp_path, BUILD_COUNTER=str(counter), BUILD_SLEEP_S="613")
    script = (
        "import sys, time; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import image_repo, pickle; "
        "from bisector.workers.build_ahead import AheadStatus, BuildAhead; ahead = BuildAhead(1); "
        "ahead.want([pickle.loads(bytes.fromhex(sys.argv[3]))], lambda sha: True); time.sleep(600)"
    )
    import pickle

    here = str(Path(__file__).parent)
    coordinator = subprocess.Popen([sys.executable, "-c", script, here, os.getcwd(), pickle.dumps(request).hex()])
    try:
        # the build writes its counter line, then starts its sleep
        wait_for(lambda: bool(processes_with("sleep 613")), what="the build's sleep")
    finally:
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
    wait_for(lambda: not processes_with("sleep 613"), what="the orphaned build to be killed")
    assert ImageStatus.READY.value not in _manifests().values()


def test_a_build_ahead_process_that_dies_has_its_build_ended_by_the_coordinator(tmp_path: Path):
    ahead, sha = _long_build(tmp_path, "617")
    dead = ahead.running[sha].proc
    dead.kill()
    wait_for(lambda: bool(ahead.reap()), what="the dead build-ahead process to be reaped")
    assert [o.status for o in ahead.outcomes.values()] == [AheadStatus.DIED]
    assert not processes_with("sleep 617")
    root = git(tmp_path / "repo", "rev-list", "--max-parents=0", "HEAD")
    ahead.want([_request(tmp_path / "repo", root, tmp_path)], still_needed)  # later builds get a new process
    assert ahead.running[root].proc is not dead
    wait_for(lambda: bool(ahead.reap()), what="the next build to end")
    assert ahead.outcomes[root].status is AheadStatus.READY
    ahead.close()


def test_a_build_ahead_process_that_dies_has_the_commands_of_its_own_session_ended(tmp_path: Path):
    """The child's own commands (git, the tar unpacking a tree; a tar that waits here) run in the child's process
    group, not a build's: a child SIGKILLed (OOM) while one runs does not leave it running."""
    repo = make_image_repo(tmp_path / "repo", (10, 10))
    waiting = tmp_path / "bin"
    waiting.mkdir()
    (waiting / "tar").write_text(f'#!/bin/sh\nsleep 631\nexec {shutil.which("tar")} "$@"\n')
    (waiting / "tar").chmod(0o755)
    ahead = BuildAhead(1, {**os.environ, "PATH": f"{waiting}{os.pathsep}{os.environ['PATH']}"})
    ahead.want([_request(repo.path, repo.shas[1], tmp_path)], still_needed)
    wait_for(lambda: bool(processes_with("sleep 631")), what="the tree's unpacking")
    ahead.running[repo.shas[1]].proc.kill()
    wait_for(lambda: bool(ahead.reap()), what="the dead build-ahead process to be reaped")
    assert [o.status for o in ahead.outcomes.values()] == [AheadStatus.DIED]
    assert not processes_with("sleep 631")
    ahead.close()


def test_a_build_ahead_process_that_dies_just_before_the_next_build_starts_still_reports_its_builds(tmp_path: Path):
    """The window between want()'s reap and the start of the next child: what the dead child's builds came to is
    reported by the next reap, never dropped."""
    ahead, sha = _long_build(tmp_path, "619")
    dead = ahead.running[sha].proc
    dead.kill()
    dead.wait()
    ahead._child()  # as want() does next: a new child where the old one died
    assert [o.status for o in ahead.reap()] == [AheadStatus.DIED]
    assert ahead.outcomes[sha].status is AheadStatus.DIED
    ahead.close()


def test_a_build_that_cannot_start_is_an_outcome_not_an_error_of_the_bisect(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", (10, 10))
    (tmp_path / "logs").write_text("a file where the log folder should be")
    ahead = BuildAhead(2)
    ahead.want([_request(repo.path, repo.shas[1], tmp_path)], still_needed)
    assert not ahead.running
    assert [o.status for o in ahead.outcomes.values()] == ["error"]
    ahead.want([_request(repo.path, repo.shas[1], tmp_path)], still_needed)  # tried once per bisect
    assert not ahead.running


def test_builds_ahead_of_every_bisect_on_a_host_share_its_slots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BISECT_BUILD_AHEAD_SLOTS", "1")
    repo = make_image_repo(tmp_path / "repo", (10, 10, 10))
    counter = tmp_path / "builds"
    first, second = BuildAhead(2), BuildAhead(2)  # two bisects' pools
    first.want([_request(repo.path, repo.shas[1], tmp_path, BUILD_COUNTER=str(counter), BUILD_SLEEP_S="619")],
               still_needed)  # fmt: skip
    wait_for(counter.exists, what="the first build to start")
    second.want([_request(repo.path, repo.shas[2], tmp_path, BUILD_COUNTER=str(counter), BUILD_SLEEP_S="0")],
                still_needed)  # fmt: skip
    second_log = tmp_path / "logs" / f"build-ahead-{repo.shas[2][:12]}.log"
    wait_for(lambda: second_log.exists() and "slot" in second_log.read_text(), what="the second build to wait")
    assert counter.read_text().splitlines() == ["build at 1"]  # the one slot is the first build's
    first.close()  # its slot is free: the second build goes on
    wait_for(lambda: bool(second.reap()), what="the second build to end")
    assert [o.status for o in second.outcomes.values()] == ["ready"]
    assert counter.read_text().splitlines() == ["build at 1", "build at 2"]
    second.close()


def test_builds_ahead_start_likeliest_first_and_no_more_at_once_than_the_host_has_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("BISECT_BUILD_AHEAD_SLOTS", "1")
    repo = make_image_repo(tmp_path / "repo", (10, 10, 10))
    counter = tmp_path / "builds"
    likeliest_first = [repo.shas[2], repo.shas[1]]
    ahead = BuildAhead(len(likeliest_first))  # both wanted; the host builds one at a time
    requests = [_request(repo.path, sha, tmp_path, BUILD_COUNTER=str(counter)) for sha in likeliest_first]
    ahead.want(requests, still_needed)
    assert list(ahead.running) == [repo.shas[2]]  # no second process only to wait for the slot
    wait_for(lambda: bool(ahead.want(requests, still_needed)), what="the first build to end")
    assert list(ahead.running) == [repo.shas[1]]  # then the next likeliest
    wait_for(lambda: bool(ahead.reap()), what="the second build to end")
    assert counter.read_text().splitlines() == ["build at 2", "build at 1"]
    assert {o.status for o in ahead.outcomes.values()} == {AheadStatus.READY}
    ahead.close()


def test_images_built_ahead_are_recorded_as_they_are_made_so_a_killed_coordinator_keeps_them(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", (10,) * 11 + (5,) * 5)
    db = tmp_path / "b.db"
    coordinator = start_cli(*_start_args(repo, tmp_path / "builds"), db=db)

    def recorded() -> list[str]:
        shown = run_cli("show", "1", "--format", "json", db=db)
        return list(json.loads(shown.stdout)["built_ahead"]) if shown.returncode == 0 else []

    try:
        wait_for(lambda: bool(recorded()), what="an image built ahead to be recorded")
    finally:
        os.killpg(coordinator.pid, signal.SIGKILL)
        coordinator.communicate()
    before = recorded()
    resumed = run_cli("resume", "1", "--format", "json", db=db)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["first_bad"]["sha"] == repo.shas[11]
    assert report["built_ahead"][: len(before)] == before  # the first coordinator's builds are still counted


def test_a_build_ahead_that_fails_keeps_no_failed_image_so_the_step_builds_and_judges_it(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", (10,))
    broken = commit(repo.path, "broken build", {"broken": "yes\n"})
    ahead = BuildAhead(1)
    ahead.want([_request(repo.path, broken, tmp_path)], still_needed)
    wait_for(lambda: bool(ahead.reap()), what="the build to fail")
    assert [o.status for o in ahead.outcomes.values()] == [AheadStatus.FAILED]
    assert _manifests() == {}  # a step's own build decides whether the commit skips
    ahead.close()


def test_sigterm_to_a_build_ahead_cancels_its_build(tmp_path: Path):
    ahead, sha = _long_build(tmp_path, "623")
    os.kill(ahead.running[sha].proc.pid, signal.SIGTERM)  # a CI runner's, to the coordinator's group
    wait_for(lambda: bool(ahead.reap()), what="the build-ahead process to end")
    assert [o.status for o in ahead.outcomes.values()] == [AheadStatus.CANCELLED]
    assert not processes_with("sleep 623")
    assert _manifests() == {}
    ahead.close()


class HeldCache(ImageCache):
    """A cache whose first LRU pass waits until `release` is set; every pass's keep is recorded."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release
        self.passes: list[frozenset[str]] = []

    def evict(self, max_bytes: int, keep: frozenset[str] = frozenset(), older_than_s: float | None = None) -> list[str]:
        self.passes.append(keep)
        if len(self.passes) == 1:
            self.release.wait()
        return super().evict(max_bytes, keep, older_than_s)


def test_builds_ahead_that_end_together_share_one_pass_of_the_cache_cap_that_keeps_each_image():
    release = threading.Event()
    cache = HeldCache(release)
    eviction = SharedEviction(cache)
    first = threading.Thread(target=eviction, args=(1 << 30, frozenset({"a"})))
    first.start()
    wait_for(lambda: len(cache.passes) == 1, what="the first pass")
    others = [threading.Thread(target=eviction, args=(1 << 30, frozenset({name}))) for name in "bcdefg"]
    for thread in others:
        thread.start()
    wait_for(lambda: len(eviction.wanted) == len(others), what="the builds ending meanwhile to wait")
    release.set()
    for thread in [first, *others]:
        thread.join()
    assert cache.passes == [frozenset("a"), frozenset("bcdefg")]  # one pass for the six, keeping each one's image


def test_an_image_built_ahead_has_the_bisect_s_patches_and_env_so_its_step_finds_it(tmp_path: Path):
    repo = make_image_repo(tmp_path / "repo", (10, 10))
    added = "--- /dev/null\n+++ b/PATCHED.txt\n@@ -0,0 +1 @@\n+from the patch\n"
    patch = Patch(PatchKind.DIFF, "fix.patch", added)
    recipe = ImageRecipe("venv", patches=(patch,), env=(("FLAVOR", "fast"),))
    request = replace(_request(repo.path, repo.shas[1], tmp_path, FLAVOR="fast"), image=recipe)
    ahead = BuildAhead(1)
    ahead.want([request], still_needed)
    wait_for(lambda: bool(ahead.reap()), what="the build to end")
    [outcome] = ahead.outcomes.values()
    assert outcome.status is AheadStatus.READY, outcome.detail
    assert outcome.image is not None
    wanted = image_key(str(repo.path), repo.shas[1], BUILD_CMD, recipe).id
    others = {
        image_key(str(repo.path), repo.shas[1], BUILD_CMD, other).id
        for other in (ImageRecipe("venv"), replace(recipe, patches=()), replace(recipe, env=()))
    }
    assert outcome.image.id == wanted  # the key its step looks up
    assert wanted not in others  # never another step's
    assert (Path(outcome.image.path) / "src" / "PATCHED.txt").read_text() == "from the patch\n"
    ahead.close()


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a loaded CI host draws slowly
@given(
    env=st.dictionaries(st.sampled_from("ABCDE"), st.sampled_from(["", "1", "x y"])),
    base=st.dictionaries(st.sampled_from("ABCDE"), st.sampled_from(["", "1", "x y"])),
)
def test_an_environment_sent_as_its_changes_to_the_child_s_own_is_the_same_environment(
    env: dict[str, str], base: dict[str, str]
):
    assert with_changes(base, env_changes(env, base)) == env


def test_a_build_ahead_sees_the_environment_its_step_would_not_the_coordinator_s_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Orders carry the variables that differ from the child's environment, which is the builder's base env."""
    repo = make_image_repo(tmp_path / "repo", (10, 10))
    monkeypatch.setenv("ONLY_IN_THE_COORDINATOR", "leaks")
    base = {name: value for name, value in os.environ.items() if name != "ONLY_IN_THE_COORDINATOR"}
    ahead = BuildAhead(1, base_env={**base, "ONLY_IN_THE_BASE": "from the base"})
    dump = tmp_path / "env"
    request = replace(
        _request(repo.path, repo.shas[1], tmp_path, FROM_THE_SPEC="from the spec"),
        build_cmd=f"env > {dump}; {BUILD_CMD}",
    )
    ahead.want([request], still_needed)
    wait_for(lambda: bool(ahead.reap()), what="the build to end")
    ahead.close()
    seen = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert seen["ONLY_IN_THE_BASE"] == "from the base"
    assert seen["FROM_THE_SPEC"] == "from the spec"
    assert seen["BISECT_SHA"] == repo.shas[1]
    assert "ONLY_IN_THE_COORDINATOR" not in seen


class TakenInFirst(BuildServer):
    """Records, as each build starts its work, how many of the builds ordered were taken in by then."""

    def __init__(self) -> None:
        super().__init__()
        self.taken_in_at_start: list[int] = []

    def run(self, job: BuildAheadJob, cancel: CancelSignal, released: threading.Event) -> None:
        released.wait()
        with self.lock:
            self.taken_in_at_start.append(len(self.cancels))


def test_the_builds_ordered_together_start_their_work_once_all_of_them_are_taken_in(tmp_path: Path):
    """Started one by one, each build's own work would hold up the intake of the next (one interpreter for all)."""
    job = BuildAheadJob(
        repo=str(tmp_path), sha="", build_cmd="true", mode="venv", inputs=(), max_bytes=1 << 30, artifact=None,
        env={}, timeout_s=60, infra_patterns=(), log_path=str(tmp_path / "log"),
    )  # fmt: skip
    orders = [json.dumps({"build": {**asdict(replace(job, sha=f"{i:040x}")), "patches": []}}) for i in range(8)]
    read, write = os.pipe()
    os.write(write, "".join(f"{order}\n" for order in orders).encode())
    os.close(write)
    server = TakenInFirst()
    server.read_commands(read)
    os.close(read)
    for thread in server.threads:
        thread.join()
    assert server.taken_in_at_start == [len(orders)] * len(orders)


def test_no_more_builds_ahead_hold_a_slot_at_once_than_the_host_has(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BISECT_BUILD_AHEAD_SLOTS", "3")
    held = [take_slot(lambda: True) for _ in range(3)]  # each looks from its own first slot, round the ring
    assert None not in held
    assert take_slot(lambda: True) is None  # every slot taken: it would wait
    os.close(held.pop(1))  # type: ignore[arg-type]
    held.append(take_slot(lambda: True))
    assert None not in held
    for fd in held:
        os.close(fd)  # type: ignore[arg-type]


def test_a_pass_of_orders_goes_out_while_the_build_ahead_process_is_busy(tmp_path: Path):
    """The coordinator's loop never waits for the child to read: a pass of dozens of orders (about 1 KB each) fits
    its stdin. A stopped child stands for a busy one; the bound is a safety net against a hang."""
    repo = make_image_repo(tmp_path / "repo", (10, 10, 10))
    ahead = BuildAhead(2)
    ahead.want([replace(_request(repo.path, repo.shas[1], tmp_path), build_cmd="sleep 629")], still_needed)
    child = ahead.running[repo.shas[1]].proc
    child.send_signal(signal.SIGSTOP)
    try:
        big = {"BIG_1": "x" * 100_000, "BIG_2": "y" * 100_000}  # more than a default pipe holds
        sending = threading.Thread(
            target=ahead.want, args=([replace(_request(repo.path, repo.shas[2], tmp_path, **big), build_cmd="true")],
                                     still_needed),
        )  # fmt: skip
        sending.start()
        sending.join(timeout=120)
        assert not sending.is_alive()
    finally:
        child.send_signal(signal.SIGCONT)
    ahead.close()


def _unread_bytes(fd: int) -> int:
    """How many bytes wait in the pipe read through fd."""
    unread: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    return unread


def test_a_build_ahead_process_blocked_printing_an_outcome_still_takes_in_orders(tmp_path: Path):
    """The coordinator writes a pass of orders without reading the child's output meanwhile: a child whose stdout
    is full still takes them in, else each waits for the other forever. Both pipes hold one page; the outcome is
    longer than that (a long origin URL in its image's key), so a full stdout shows its print under way, and
    blocked. The bound is a safety net against a hang."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bisector.workers.build_ahead_child"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    assert child.stdin is not None
    assert child.stdout is not None
    fcntl.fcntl(child.stdin.fileno(), fcntl.F_SETPIPE_SZ, os.sysconf("SC_PAGE_SIZE"))
    stdout_bytes = fcntl.fcntl(child.stdout.fileno(), fcntl.F_SETPIPE_SZ, os.sysconf("SC_PAGE_SIZE"))
    repo = make_image_repo(tmp_path / "repo", (10,))
    git(repo.path, "remote", "add", "origin", "https://example.org/" + "x" * 2 * stdout_bytes)
    (tmp_path / "logs").mkdir()
    job = BuildAheadJob.of(replace(_request(repo.path, repo.shas[0], tmp_path), build_cmd=None), dict(os.environ))
    order = {"build": {**asdict(job), "env": env_changes(job.env, os.environ), "patches": []}}
    stops = [{"stop": f"{i:040x}"} for i in range(16 * stdout_bytes // 50)]  # 16 pipes' worth, and more
    orders = b"".join(json.dumps(stop).encode() + b"\n" for stop in stops)

    def send() -> None:
        assert child.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # the child killed by a failed run of this test
            child.stdin.write(orders)
            child.stdin.flush()

    sending = threading.Thread(target=send, daemon=True)
    try:
        child.stdin.write(json.dumps(order).encode() + b"\n")
        child.stdin.flush()
        wait_for(lambda: _unread_bytes(child.stdout.fileno()) == stdout_bytes, what="the outcome to fill stdout")
        sending.start()
        sending.join(timeout=60)
        assert not sending.is_alive(), "the build-ahead process stopped taking in orders while its stdout was full"
        outcome = json.loads(child.stdout.readline().decode().removeprefix("outcome "))
        assert outcome["status"] == AheadStatus.READY
        assert outcome["image"]["key"]["repo"].startswith("https://example.org/xxx")
        child.stdin.close()
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        sending.join(timeout=60)
        for pipe in (child.stdin, child.stdout):
            with contextlib.suppress(OSError):  # what the killed child did not read
                pipe.close()


def test_close_reads_the_outcomes_a_build_ahead_process_prints_while_it_ends(tmp_path: Path):
    """A child ends once its builds' outcomes are printed: close() reads them while it waits, else a child whose
    stdout is full could never exit, and its builds, though made, would count as died. The child's stdout holds one
    page; the outcome is longer than that (a long origin URL in its image's key)."""
    ahead = BuildAhead(1)
    child = ahead._child()
    assert child.stdout is not None
    stdout_bytes = fcntl.fcntl(child.stdout.fileno(), fcntl.F_SETPIPE_SZ, os.sysconf("SC_PAGE_SIZE"))
    repo = make_image_repo(tmp_path / "repo", (10,))
    git(repo.path, "remote", "add", "origin", "https://example.org/" + "x" * 2 * stdout_bytes)
    ahead.want([replace(_request(repo.path, repo.shas[0], tmp_path), build_cmd=None)], still_needed)
    wait_for(lambda: _unread_bytes(child.stdout.fileno()) == stdout_bytes, what="the outcome to fill stdout")
    [outcome] = ahead.close()
    assert (outcome.sha, outcome.status) == (repo.shas[0], AheadStatus.READY), outcome.detail
    assert ahead.outcomes[repo.shas[0]] == outcome
    assert child.returncode == 0  # it exited by itself, not killed
