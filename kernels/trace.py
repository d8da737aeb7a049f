"""The dispatch trace: with KERNELS_DISPATCH_TRACE=FILE set, each distinct dispatch decision of a process
appends one JSON line to FILE, e.g.

    {"op": "moe_router", "N": 896, "K": 7168, "m": 4, "kernel": "mma", "reason": "table"}

No torch here: the core reads these files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TRACE_ENV = "KERNELS_DISPATCH_TRACE"

_seen: set[tuple[str, str]] = set()


def record(decision: dict[str, object]) -> None:
    """Append the decision to the trace file if tracing is on and this process has not written it yet."""
    path = os.environ.get(TRACE_ENV, "")
    if not path:
        return
    line = json.dumps(decision, sort_keys=False)
    key = (path, line)
    if key in _seen:
        return
    _seen.add(key)
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def read(path: Path) -> list[dict[str, object]]:
    """The decisions in a trace file, in the order they were made."""
    rows: list[dict[str, object]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows
