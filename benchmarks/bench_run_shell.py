"""What a worker's `run_shell` adds to a step's own time: run_s against the same command run directly.

    python benchmarks/bench_run_shell.py [--runs 10] [--command "sleep 1"] [--gap-s 0.2] [--out FILE]

Alternating, --runs times each, --gap-s apart (steps are not back to back: a worker waits for its next request):
`subprocess.run(["bash", "-c", COMMAND])` timed around the call (bench_core's direct time); `run_shell(COMMAND)`'s
elapsed_s (what a step stores as run_s), through a launcher that joined its cgroup while the worker waited
(workers/step_launcher.py: every step of a worker), then joining its cgroup at the step, then with no cgroup; and,
inside a shell, the one write that moves the shell into a fresh cgroup (`echo $$ > cgroup.procs`, timed with bash's
$EPOCHREALTIME). Medians in ms, as a table and in --out (JSON).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import RESULTS, ROOT, load_average, machine_info, write_results

sys.path.insert(0, str(ROOT))

from bisector.workers import cgroups, process, step_launcher

_TIMED_MOVE = 'a=$EPOCHREALTIME; echo $$ >"$0"; b=$EPOCHREALTIME; echo "$a $b"'


def direct(command: str, cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["bash", "-c", command], cwd=cwd, check=False, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def wrapped(command: str, cwd: Path, *, step_cgroup: bool, launcher: bool) -> float:
    """run_shell's elapsed_s: through the launcher that joined its cgroup ahead of the step (a worker's every step
    but the first), joining its cgroup at the step (no launcher ready), or with no step cgroup at all."""
    if launcher:
        step_launcher.keep_one_ready()  # as a worker keeps one, started while its previous step ran (not timed)
    real_create = cgroups.StepCgroup.__dict__["create"]
    real_launch = step_launcher.launch
    if not step_cgroup:
        cgroups.StepCgroup.create = classmethod(lambda cls: None)  # type: ignore[method-assign,assignment]
    if not launcher:
        step_launcher.launch = lambda argv, cwd, env: None  # type: ignore[assignment]
    try:
        with tempfile.TemporaryFile() as log:
            return process.run_shell(command, cwd, dict(os.environ), log, 600).elapsed_s
    finally:
        cgroups.StepCgroup.create = real_create  # type: ignore[method-assign]
        step_launcher.launch = real_launch


def cgroup_move() -> float:
    cgroup = cgroups.StepCgroup.create()
    if cgroup is None:
        return float("nan")
    try:
        done = subprocess.run(["bash", "-c", _TIMED_MOVE, str(cgroup.procs)], capture_output=True, text=True)
        before, after = map(float, done.stdout.split())
        return after - before
    finally:
        cgroup.kill_and_remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--command", default="sleep 1")
    parser.add_argument("--gap-s", type=float, default=0.2, help="pause between two measurements")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_run_shell.json")
    args = parser.parse_args()
    cwd = Path(tempfile.gettempdir())
    runners: dict[str, Callable[[], float]] = {
        "direct (bash -c)": lambda: direct(args.command, cwd),
        "run_shell (run_s), its launcher ready": lambda: wrapped(args.command, cwd, step_cgroup=True, launcher=True),
        "run_shell joining its cgroup at the step": lambda: wrapped(
            args.command, cwd, step_cgroup=True, launcher=False
        ),
        "run_shell without the step cgroup": lambda: wrapped(args.command, cwd, step_cgroup=False, launcher=False),
        "the shell's move into its cgroup": cgroup_move,
    }
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.runs):
        for name, run in runners.items():
            samples[name].append(run())
            time.sleep(args.gap_s)
    medians = {name: round(1000 * statistics.median(values), 2) for name, values in samples.items()}
    print(f"command {args.command!r}, {args.runs} runs each, {args.gap_s} s apart; medians:")
    for name, value in medians.items():
        print(f"{name:40} {value:10.2f} ms")
    result = {"parameters": vars(args) | {"out": str(args.out)}, "median_ms": medians}
    result["machine"] = machine_info() | {"load_average_at_end": load_average()}
    write_results(args.out, result)
    print(f"results: {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
