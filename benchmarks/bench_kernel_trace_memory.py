"""Peak memory of a program run under the kernel trace (`--trace-kernels`), by how long it runs.

    python benchmarks/bench_kernel_trace_memory.py [--seconds 10,30] [--drain 2,0] [--device cuda|cpu]
        [--thread main|thread] [--out F]

Runs a program that launches tiny kernels (an in-place add on a 16-element tensor) back to back for the given
seconds, with the hook injected as a traced re-run injects it (bisector/analysis/hook/sitecustomize.py), once per
drain period ($BISECT_KERNEL_TRACE_DRAIN_S; 0: one profiler to the end) and once with no trace. Prints, per run:
launches, launches the trace counted, drains, the child's peak RSS (ru_maxrss) and wall time. A profiler keeps
every event until stopped, so without drains the peak grows with the run; with them it is one period's worth.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOOK = Path(__file__).resolve().parents[1] / "bisector" / "analysis" / "hook"
PROGRAM = """
import sys, threading, time, torch
launched = []
def launch():
    x = torch.zeros(16, device=sys.argv[1])
    count, deadline = 0, time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        for _ in range(1000):
            x.add_(1)
        count += 1000
    if sys.argv[1] == "cuda":
        torch.cuda.synchronize()
    launched.append(count)
if sys.argv[3] == "thread":  # the first CUDA call off the main thread, as in a server's model thread
    worker = threading.Thread(target=launch)
    worker.start()
    worker.join()
else:
    launch()
print(launched[0])
"""


def run(device: str, seconds: float, drain: str | None, work: Path, where: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BISECT_KERNEL_TRACE")}
    trace = work / f"{device}-{seconds:g}-{drain}.jsonl"
    if drain is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK), env.get("PYTHONPATH")]))
        env["BISECT_KERNEL_TRACE"] = str(trace)
        env["BISECT_KERNEL_TRACE_DRAIN_S"] = drain
    started = time.monotonic()
    argv = [sys.executable, "-c", PROGRAM, device, str(seconds), where]
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert child.stdout is not None
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the largest child's so far
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    if child.returncode != 0:
        raise SystemExit(f"the program exited {child.returncode}")
    records = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    counted = sum(sum(r.get("kernels", {}).values()) for r in records if "kernels" in r)
    return {
        "device": device, "thread": where, "seconds": seconds, "drain_s": drain, "launched": int(out.split()[-1]),
        "counted": counted, "drains": sum(r.get("drains", 0) for r in records),
        "errors": [r["error"] for r in records if "error" in r],
        "peak_rss_mb": round(usage.ru_maxrss / 1024), "wall_s": round(wall, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", default="10,30")
    parser.add_argument("--drain", default="2,0", help="Drain periods to compare (0: one profiler to the end).")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument(
        "--thread",
        choices=["main", "thread"],
        default="main",
        help="Launch from the main thread or from another one (the profiler then has a thread of its own).",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-ktrace-") as scratch:
        plans = [(float(s), None) for s in args.seconds.split(",")]
        plans += [(float(s), d) for d in args.drain.split(",") for s in args.seconds.split(",")]
        for seconds, drain in plans:
            results.append(run(args.device, seconds, drain, Path(scratch), args.thread))
            print(json.dumps(results[-1]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
