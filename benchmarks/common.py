"""What the benchmarks share: the machine they ran on, and exact ceil(log_b n)."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def project_pythonpath() -> str:
    """This checkout first, then what the caller had (the GPU machine's bundle lives on PYTHONPATH)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def capture(*cmd: str, cwd: Path | None = None, strip: bool = True) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if strip else done.stdout


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    os_name = platform.platform()
    try:
        release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        os_name = f"{release.get('PRETTY_NAME', '').strip(chr(34))} (kernel {platform.release()})"
    except OSError:
        pass
    dirty = capture("git", "status", "--porcelain", "--untracked-files=no", cwd=ROOT, strip=False)
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": mem_gib,
        "os": os_name,
        "python": platform.python_version(),
        "git": capture("git", "--version"),
        "commit": capture("git", "rev-parse", "--short", "HEAD", cwd=ROOT),
        "modified_files": [line[3:] for line in dirty.splitlines() if line.strip()],
        "load_average_at_start": load_average(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def ceil_log(n: int, base: int) -> int:
    """The smallest k with base**k >= n (exact, no floating point)."""
    k, power = 0, 1
    while power < n:
        power *= base
        k += 1
    return k
