"""One rule for "is this process gone", by host, pid and start time: a process only judged gone where this host can
tell (the pid names no process, or a later one); never where it cannot see (another host, an unknown start)."""

from __future__ import annotations

import os
import socket
import subprocess

from bisector.runner.ownership import OwnerId
from bisector.vocab.processes import is_gone, process_start


def test_a_live_process_is_not_gone_and_an_ended_one_is() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    started = process_start(sleeper.pid)
    host = socket.gethostname()
    assert started is not None
    assert not is_gone(host, sleeper.pid, started)
    assert not OwnerId(host, sleeper.pid, started).is_gone_here()
    assert is_gone(host, sleeper.pid, str(int(started) - 1))  # the pid now names another process
    sleeper.kill()
    sleeper.wait()
    assert is_gone(host, sleeper.pid, started)
    assert OwnerId(host, sleeper.pid, started).is_gone_here()


def test_what_this_host_cannot_judge_is_not_gone() -> None:
    me = os.getpid()
    assert not is_gone("another-host", 2**22 + 7, "123")  # another host's process
    assert not is_gone(socket.gethostname(), me, "?")  # its start time was not known when it was recorded
    assert not is_gone(socket.gethostname(), me, None)
    assert not OwnerId(socket.gethostname(), me, "?").is_gone_here()
