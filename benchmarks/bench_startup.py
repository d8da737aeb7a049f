"""Where `bisect start`'s start-up and tear-down go: phase timestamps of real runs, fresh and existing store.

    python benchmarks/bench_startup.py [--runs 5] [--workers 1] [--commits 1000] [--out FILE]

One synthetic history (synthetic, a test that takes no time) is bisected --runs times on a fresh SQLite
store per run and --runs times on one store made before (schema and one bisect: a user's store). Each run is
`python -c CHILD start ...`, where the child wraps the functions that mark the phases
(functools.wraps around the module attributes, before `bisect start` looks them up), runs the CLI's own entry point
and prints the timestamps; the parent adds its spawn time, the process's exit and the moment its stdout and stderr
close (the fork server holds them until it exits). Medians per phase in ms, as a table and in --out (JSON).
Compile the bytecode first where PYTHONDONTWRITEBYTECODE=1 (see bench_core.py --help).
"""

from __future__ import annotations

import argparse
import builtins
import functools
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT, load_average, machine_info, write_results

# `python -c`: a script as __main__ would be imported again by the fork server (multiprocessing's main_path)
CHILD = (
    f"import sys, time; started = time.time(); sys.path.insert(0, {str(Path(__file__).parent)!r}); "
    "import bench_startup; bench_startup.child(sys.argv[1:], started)"
)
# (module, attribute path, label): the calls whose start and end the child records
WRAPPED = (
    ("bisector.workers.local_forkserver", "boot", "boot fork server"),
    ("bisector.cli", "spec_from_params", "spec"),
    ("bisector.runner.wiring", "make_executor", "make executor"),
    ("bisector.runner.wiring", "open_store", "open store"),
    ("bisector.vocab.gitrepo", "GitRepo.range_for_bisect", "range listing"),
    ("bisector.db.store", "Store.create_bisect", "store bisect"),
    ("bisector.db.store", "Store.add_candidates", "store candidates"),
    ("bisector.runner.coordinator", "Coordinator._run", "search"),
    ("bisector.workers.local", "LocalExecutor.close", "executor close"),
    ("bisector.cli", "print_report", "print report"),
    ("bisector.db.store", "Store.close", "store close"),
)
# phase name -> (from mark, to mark); marks are "<label> >" / "<label> <" or the parent's own
PHASES = {
    "interpreter start": ("spawn", "main"),
    "import bisector.cli (click, rich, options)": ("bench imported", "cli imported"),
    # bisect start reads the spec (and boots the fork server) before it imports bisector.runner.wiring;
    # older commits after
    "import the rest (SQLAlchemy, GitPython, coordinator; spec too)": (
        "cli imported",
        "bisector.runner.wiring imported",
    ),
    "  spec (bisect.toml, flags)": ("spec >", "spec <"),
    "  boot fork server (the call)": ("boot fork server >", "boot fork server <"),
    "make executor (wait for the fork server, fork W)": ("make executor >", "make executor <"),
    "open store (schema or version check)": ("open store >", "open store <"),
    "range listing (git)": ("range listing >", "range listing <"),
    "store bisect and candidates": ("store bisect >", "store candidates <"),
    "START-UP: spawn -> bisect created": ("spawn", "created"),
    "bisect: created -> finished": ("created", "finished"),
    "executor close": ("executor close >", "executor close <"),
    "print report": ("print report >", "print report <"),
    "store close": ("store close >", "store close <"),
    "interpreter exit": ("SystemExit", "exited"),
    "fork server exit (stdout/stderr closed)": ("exited", "output closed"),
    "TEAR-DOWN: finished -> output closed": ("finished", "output closed"),
    "END TO END": ("spawn", "output closed"),
}


def child(argv: list[str], started: float) -> None:
    """Run `bisect` with argv in this process, recording when each wrapped call starts and ends. started: when
    the interpreter began running the command (before this module's own imports)."""
    marks: list[tuple[str, float]] = [("main", started), ("bench imported", time.time())]

    def wrap(module_name: str, path: str, label: str) -> None:
        try:
            owner: Any = importlib.import_module(module_name)
        except ModuleNotFoundError:  # an older commit without it: its phase is left out
            return
        *parents, name = path.split(".")
        for part in parents:
            owner = getattr(owner, part)
        function = getattr(owner, name)

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            marks.append((f"{label} >", time.time()))
            try:
                return function(*args, **kwargs)
            finally:
                marks.append((f"{label} <", time.time()))

        setattr(owner, name, timed)

    import bisector.cli

    marks.append(("cli imported", time.time()))
    # bisector.runner.wiring and what it imports are wrapped as `bisect start` imports them, not before (that would move
    # their import ahead of the fork server's boot).
    real_import = builtins.__import__

    def importing(name: str, *args: Any, **kwargs: Any) -> Any:
        module = real_import(name, *args, **kwargs)
        if name == "bisector.runner.wiring" and builtins.__import__ is importing:
            builtins.__import__ = real_import
            marks.append(("bisector.runner.wiring imported", time.time()))
            for module_name, path, label in WRAPPED[2:]:
                wrap(module_name, path, label)
        return module

    wrap(*WRAPPED[0])  # the boot and the spec come before bisector.runner.wiring's import
    wrap(*WRAPPED[1])
    builtins.__import__ = importing
    sys.argv = ["bisect", *argv]
    try:
        bisector.cli.main_entry()
    except SystemExit:
        marks.append(("SystemExit", time.time()))
        print("MARKS " + json.dumps(marks), file=sys.stderr)
        raise


def one_run(repo: Path, good: str, db_url: str, workers: int, work: Path) -> dict[str, float]:
    env = dict(os.environ, BISECT_GPUS="", BISECT_DATA_DIR=str(work / "data"), BISECT_CACHE_DIR=str(work / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    cmd = [
        sys.executable, "-c", CHILD, "start", "--repo", str(repo), "--good", good, "--bad", "HEAD",
        "--run", "bash test.sh", "--no-explain", "--workers", str(workers), "--format", "json", "--db", db_url,
    ]  # fmt: skip
    spawned = time.time()
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output: dict[str, tuple[bytes, float]] = {}

    def drain(name: str, stream: Any) -> None:
        data = stream.read()
        output[name] = (data, time.time())

    readers = [threading.Thread(target=drain, args=item) for item in (("out", process.stdout), ("err", process.stderr))]
    for reader in readers:
        reader.start()
    process.wait()
    exited = time.time()
    for reader in readers:
        reader.join()
    if process.returncode != 0:
        raise SystemExit(f"bench_startup: bisect start exited {process.returncode}: {output['err'][0][-2000:]!r}")
    report = json.loads(output["out"][0])
    marks = dict(reversed(json.loads(output["err"][0].decode().split("MARKS ", 1)[1].splitlines()[0])))
    marks |= {"spawn": spawned, "exited": exited, "output closed": max(t for _, t in output.values())}
    marks |= {key: datetime.fromisoformat(report[key]).timestamp() for key in ("created", "finished")}
    return {phase: 1000 * (marks[end] - marks[start]) for phase, (start, end) in PHASES.items() if start in marks}


def measure(runs: int, workers: int, commits: int, work: Path) -> dict[str, dict[str, float]]:
    from synthetic import culprit_history

    history = culprit_history(work / "repo", commits, commits // 2, sleep_s=0.0)
    existing = f"sqlite:///{work / 'existing.db'}"
    one_run(work / "repo", history.shas[0], existing, workers, work)  # makes it; also the warm-up
    results: dict[str, list[dict[str, float]]] = {"fresh": [], "existing": []}
    for index in range(runs):  # alternating, so that both see the same load
        results["fresh"].append(
            one_run(work / "repo", history.shas[0], f"sqlite:///{work / f'{index}.db'}", workers, work)
        )
        results["existing"].append(one_run(work / "repo", history.shas[0], existing, workers, work))
    return {
        kind: {phase: round(statistics.median(r.get(phase, 0.0) for r in rows), 1) for phase in PHASES}
        for kind, rows in results.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="runs per kind of store")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_startup.json")
    args = parser.parse_args()
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as work:
        medians = measure(args.runs, args.workers, args.commits, Path(work))
    print(f"{'median ms':58} {'fresh store':>12} {'existing':>12}")
    for phase in PHASES:
        print(f"{phase:58} {medians['fresh'][phase]:12.1f} {medians['existing'][phase]:12.1f}")
    result = {"parameters": vars(args) | {"out": str(args.out)}, "machine": machine, "median_ms": medians}
    result["machine"]["load_average_at_end"] = load_average()
    write_results(args.out, result)
    print(f"results: {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
