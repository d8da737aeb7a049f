"""`bisect dashboard` in a subprocess on a free loopback port, and waiting for it to answer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120.0  # how long a slow, shared machine may take to import and bind


def dashboard_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "bisector", "dashboard", *args]


def dashboard_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("BISECT_TOKEN", "BISECT_DB")}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)  # after ROOT: what the caller had
    return {**env, "PYTHONPATH": path, **extra}


def announced_url(process: subprocess.Popen[str]) -> str:
    """The URL from the server's "bisect dashboard: URL over STORE" line (printed once it listens)."""
    assert process.stderr is not None
    line = process.stderr.readline()  # '' when it exits first
    match = re.match(r"bisect dashboard: (http://\S+)/ over ", line)
    if match is None:
        raise RuntimeError(f"dashboard exited {process.wait()}: {line}{process.stderr.read()}")
    return match.group(1)


@contextmanager
def running_dashboard(store_url: str, log_dir: Path | None, *args: str, **env: str) -> Iterator[str]:
    """The base URL of a dashboard serving store_url (logs from log_dir; None: its default, the store's own log
    folder in the data dir); stopped (SIGTERM, then SIGKILL) afterwards."""
    logs = ["--log-dir", str(log_dir)] if log_dir is not None else []
    command = dashboard_command("--port", "0", "--db", store_url, *logs, *args)  # 0: the kernel picks a free port
    process = subprocess.Popen(
        command, env=dashboard_env(**env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        base = announced_url(process)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"dashboard exited {process.returncode}: {process.stderr.read()}")  # type: ignore[union-attr]
            try:
                httpx.get(f"{base}/api/openapi.json", timeout=5.0)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
