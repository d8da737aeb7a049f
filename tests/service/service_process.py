"""`bisect serve` in a subprocess on a free loopback port: started, waited for, killed (SIGKILL) or stopped.

The tests of tests/service use it, and so does benchmarks/chaos_service.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120.0  # how long a slow, shared machine may take to import, clone and bind
DONE_TIMEOUT_S = 300.0  # a safety net for waits on jobs, never a speed target
TOKEN = "test-token-123"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServiceStartError(RuntimeError):
    """`bisect serve` exited, or did not listen, before it answered."""


class ServiceProcess:
    """One `bisect serve` address (a free loopback port), in its own process group; started again on the same
    port after a kill. Its stderr goes to a pipe, read when it exits early, or with stderr_dir to one file per
    start (`serve-N.err`), for a server started many times (benchmarks/chaos_service.py)."""

    def __init__(self, args: list[str], env: dict[str, str], stderr_dir: Path | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.args = args
        self.env = env
        self.stderr_dir = stderr_dir
        self.process: subprocess.Popen[str] | None = None
        self.starts = 0

    def start(self) -> None:
        command = [sys.executable, "-m", "bisector", "serve", "--port", str(self.port), *self.args]
        if self.stderr_dir is None:
            self.process = self._popen(command, subprocess.PIPE)
        else:
            with (self.stderr_dir / f"serve-{self.starts}.err").open("w") as err:
                self.process = self._popen(command, err)
        self.starts += 1
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise ServiceStartError(f"bisect serve exited {self.process.returncode}: {self._stderr()}")
            try:
                httpx.get(f"{self.base}/api/openapi.json", timeout=5.0)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise ServiceStartError(f"bisect serve not listening after {READY_TIMEOUT_S:.0f} s") from None
                time.sleep(0.1)

    def _popen(self, command: list[str], stderr: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(
            command, env=self.env, stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
            start_new_session=True,
        )  # fmt: skip

    def _stderr(self) -> str:
        if self.stderr_dir is not None:
            return f"see {self.stderr_dir / f'serve-{self.starts - 1}.err'}"
        assert self.process is not None
        assert self.process.stderr is not None
        return self.process.stderr.read()

    def kill(self, whole_group: bool = False) -> None:
        """SIGKILL the server alone (its workers see their pipes close and end their tests), or with whole_group its
        process group: the server and its workers at once (the tests, in sessions of their own, are left to what
        the next server or command ends)."""
        assert self.process is not None
        if whole_group:
            os.killpg(self.process.pid, signal.SIGKILL)
        else:
            self.process.kill()
        self.process.wait()
        self._close_pipe()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            self._close_pipe()
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()

    def post(self, body: dict[str, Any], authorization: str | None = f"Bearer {TOKEN}") -> httpx.Response:
        headers = {"Authorization": authorization} if authorization is not None else {}
        return httpx.post(f"{self.base}/api/bisects", json=body, headers=headers, timeout=120.0)

    def delete(self, bisect_id: int, authorization: str | None = f"Bearer {TOKEN}", **params: float) -> httpx.Response:
        headers = {"Authorization": authorization} if authorization is not None else {}
        return httpx.delete(f"{self.base}/api/bisects/{bisect_id}", headers=headers, params=params, timeout=120.0)

    def job(self, bisect_id: int) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(f"{self.base}/api/jobs/{bisect_id}", timeout=60.0).json()
        return answer

    def count(self) -> int:
        return len(httpx.get(f"{self.base}/api/bisects", params={"limit": 1000}, timeout=60.0).json())

    def report(self, bisect_id: int) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(f"{self.base}/api/bisects/{bisect_id}", timeout=60.0).json()
        return answer

    def wait_done(self, bisect_id: int) -> dict[str, Any]:
        """The report once the job is done."""
        deadline = time.monotonic() + DONE_TIMEOUT_S
        while self.job(bisect_id)["state"] != "done":
            assert time.monotonic() < deadline, f"job {bisect_id} still {self.job(bisect_id)}"
            time.sleep(0.2)
        return self.report(bisect_id)


def service_home(root: Path) -> dict[str, str]:
    """A server's own data, cache and GPU-lock dirs under root, and no GPUs: the environment it runs in."""
    return {"BISECT_DATA_DIR": str(root / "data"), "BISECT_CACHE_DIR": str(root / "cache"), "BISECT_GPUS": "",
            "BISECT_GPU_LOCK_DIR": str(root / "locks")}  # fmt: skip


def service_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("BISECT_TOKEN", "BISECT_DB")}
    return {**env, "PYTHONPATH": str(ROOT), "BISECT_TOKEN": TOKEN, **extra}


@contextmanager
def running_service(*args: str, **env: str) -> Iterator[ServiceProcess]:
    service = ServiceProcess(list(args), service_env(**env))
    service.start()
    try:
        yield service
    finally:
        service.stop()


TEAM_RECIPES = '[recipes.synthetic]\nrun = "bash test.sh"\n\n[recipes.slow]\nrun = "sleep 600"\n'


@contextmanager
def running_team_service(home: Path, repo: Path, tokens: str) -> Iterator[ServiceProcess]:
    """`bisect serve` of one repository on 2 slots, with per-person tokens (tokens: the tokens file's TOML) and two
    recipes: synthetic (the history's test.sh) and slow (a sleep); its store is home's bisect.db."""
    (home / "serve.toml").write_text(TEAM_RECIPES)
    (home / "tokens.toml").write_text(tokens)
    args = ["--db", f"sqlite:///{home / 'bisect.db'}", "--allow-repo", str(repo), "--config", str(home / "serve.toml"),
            "--tokens-file", str(home / "tokens.toml"), "--slots", "2"]  # fmt: skip
    with running_service(*args, **service_home(home), BISECT_TOKEN="") as served:
        yield served
