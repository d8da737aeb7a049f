"""The tiny-GEMM bench on CPU at the decoder's full shapes: the CPU twins timed, checked and reported.

    python benchmarks/bench_kernels_gemm_cpu.py [--m 1,2] [--out FILE.json]

Runs `python -m bisector.kernels.bench gemm --device cpu` (a real subprocess) and checks its report as a user
reads it: both kernels and the reference timed at every m, every check passed (fp32 error, batch invariance by
m and by row position, repeatability), and nothing meaningless on a CPU (no bandwidth, no HBM column, one line
saying why). Exits 1 naming the first broken check. About 7 minutes on 2 shared cores; tests/kernels checks the
same at small shapes.
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

from common import ROOT, BenchmarkError, machine_info, project_pythonpath, run_main

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_kernels_gemm_cpu.py` without PYTHONPATH

from bisector.kernels import gemm_bench

CPU_LINE = "no copy bandwidth or HBM bound: the CPU has no HBM to measure"


def problems(report: dict, stdout: str, ms: list[str]) -> list[str]:
    """What is wrong with a CPU report, as lines; none for a good one."""
    found = []
    if report["backend"] != "cpu":
        found.append(f"backend {report['backend']!r}, not 'cpu'")
    if [(s["n"], s["k"]) for s in report["shapes"]] != gemm_bench.SHAPES:
        found.append("the report's shapes are not gemm_bench.SHAPES")
    for shape in report["shapes"]:
        name = f"{shape['n']}x{shape['k']}"
        for kernel in ("simt", "mma"):
            run = shape[kernel]
            if run["error"]:
                found.append(f"{name} {kernel}: {run['error']}")
                continue
            if sorted(run["us"]) != sorted(ms) or not all(us > 0 for us in run["us"].values()):
                found.append(f"{name} {kernel}: timings {run['us']}")
            failed = [key for key, value in run["check"].items() if value is False]
            if failed or run["check"]["rel_err_fp32"] >= 1e-5:
                found.append(f"{name} {kernel}: check {run['check']}")
        if sorted(shape["linear_us"]) != sorted(ms):
            found.append(f"{name}: reference timings {shape['linear_us']}")
        if shape["hbm_bound_us"] is not None:
            found.append(f"{name}: an HBM bound on a CPU")
    if report["copy_bandwidth_bytes_per_s"] is not None:
        found.append("a copy bandwidth on a CPU")
    if "inf" in stdout.replace("info", "") or "TB/s" in stdout or "hbm bound" in stdout or CPU_LINE not in stdout:
        found.append("the table shows a bandwidth, an HBM bound or an inf, or lacks the line saying why not")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", default="1,2", help="batch sizes to time (default 1,2)")
    parser.add_argument("--out", type=Path, help="write the bench's report, with machine and wall, as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        report_path = Path(scratch) / "gemm.json"
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "bisector.kernels.bench", "gemm", "--device", "cpu", "--m", args.m,
             "--json-out", str(report_path)],
            capture_output=True, text=True, cwd=ROOT, check=False,
            env={**os.environ, "PYTHONPATH": project_pythonpath()},
        )  # fmt: skip
        wall_s = time.perf_counter() - start
        if done.returncode != 0:
            raise BenchmarkError(f"the bench exited {done.returncode}: {done.stderr.strip()[-500:]}")
        report = json.loads(report_path.read_text())
    print(done.stdout, end="")
    print(f"wall: {wall_s:.1f} s")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine_info(), "wall_s": wall_s, "report": report}, indent=1))
    found = problems(report, done.stdout, args.m.split(","))
    if found:
        raise BenchmarkError("; ".join(found))
    return 0


if __name__ == "__main__":
    run_main(main, "bench_kernels_gemm_cpu")
