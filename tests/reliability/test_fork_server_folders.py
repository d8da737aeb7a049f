"""Fault: kill -9 of a process that started the local workers' fork server (a coordinator). multiprocessing keeps
the server's socket in a `pymp-*` folder of the temp dir that only a clean exit removes; the next gpu-bisect process
to start a fork server removes the folders of gpu-bisect processes of this host that are gone, and never one of a
process that lives or one gpu-bisect did not make."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWNER = (
    "import multiprocessing.util, time\n"
    "from bisector.workers.local_forkserver import boot\n"
    "boot()\n"
    "print(multiprocessing.util.get_temp_dir(), flush=True)\n"
    "time.sleep(600)\n"
)
NEXT_START = "from bisector.workers.local_forkserver import boot; boot()"


def start_owner(env: dict[str, str]) -> tuple[subprocess.Popen[str], Path]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    return owner, Path(owner.stdout.readline().strip())


def test_the_fork_server_folder_of_a_killed_process_is_removed_by_the_next_start():
    temp = Path(tempfile.mkdtemp(prefix="mp", dir="/tmp"))  # short: the server's socket path must fit AF_UNIX's
    env = {**os.environ, "TMPDIR": str(temp)}
    owners: list[subprocess.Popen[str]] = []
    try:
        killed, killed_folder = start_owner(env)
        living, living_folder = start_owner(env)
        owners += [killed, living]
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        assert killed_folder.is_dir(), "the kill left nothing: nothing to test"
        foreign = temp / "pymp-of-another-program"
        foreign.mkdir()

        next_start = subprocess.run(
            [sys.executable, "-c", NEXT_START], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )

        assert next_start.returncode == 0, next_start.stderr
        assert sorted(temp.iterdir()) == sorted([living_folder, foreign])  # the next start's own went at its exit
    finally:
        for owner in owners:
            owner.kill()
            owner.wait()
            if owner.stdout is not None:
                owner.stdout.close()
        shutil.rmtree(temp, ignore_errors=True)
