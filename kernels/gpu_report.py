"""One measurement session on a CUDA machine: ``python -m bisector.kernels.gpu_report OUTDIR [--quick]``.

Steps, most important first, each in fresh processes so that run-to-run repeatability is real:
1. tile sweep and tiny GEMM timing (``kernels.bench gemm --sweep``); the chosen tiles are used from then on
   through KERNELS_TRITON_TILES;
2. accept length with the good and the bad table, twice each;
3. SIMT vs MMA disagreement per shape, and the batch-invariance probe with the good and the bad table;
4. accept length with the bad table at other gains of the decoder;
5. the demo: ``kernels.demo init`` and a plain ``git bisect run`` of the bench over it, timed.
Everything goes to four files (the device machine returns at most eight): session.log, summary.md (rewritten
after each step), gemm.json and tiles.json.

Without a CUDA device every step still runs, on the CPU (the CPU twins of the kernels, the ``cpu`` decoder
configuration, no tile sweep); the session says so in its first line and in summary.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .demo import CULPRIT_SHAPES

BAD_TABLE = json.dumps({f"{n}x{k}": 2 for n, k in CULPRIT_SHAPES})
GAINS = ("1.5", "2.5")


def _run(out: Path, name: str, args: list[str], env: dict[str, str], timeout_s: int) -> tuple[str, float]:
    """Run one step, append its output to OUTDIR/session.log (few files: the device returns at most 8)."""
    start = time.perf_counter()
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        text = done.stdout + done.stderr + f"\n[exit {done.returncode}]\n"
    except subprocess.TimeoutExpired as exc:
        partial = [p if isinstance(p, str) else (p or b"").decode(errors="replace") for p in (exc.stdout, exc.stderr)]
        text = f"{partial[0]}{partial[1]}\n[timeout after {timeout_s} s]\n"
    seconds = time.perf_counter() - start
    with open(out / "session.log", "a", encoding="utf-8") as log:
        log.write(f"\n===== {name} ({seconds:.1f} s): {' '.join(args)}\n{text}")
    print(f"== {name} ({seconds:.1f} s)\n{text[-1500:]}", flush=True)
    return text, seconds


def _accept(text: str) -> str:
    match = re.search(r"accept length: ([0-9.]+)", text)
    return match[1] if match else "n/a"


def disagreement() -> list[str]:
    """Per shape: share of bf16 outputs where SIMT and MMA differ, the largest difference in ulps, and the rows
    with any difference (with MMA from m = 2, exactly these rows round differently at m = 1 and at m = 8)."""
    import torch

    from . import tiny_gemm
    from .kernel_kind import Kernel

    lines = []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(7)
    for n, k in ((144, 7168), (896, 7168), (1536, 128)):
        w = (torch.randn(n, k, generator=gen) * k**-0.5).to(torch.bfloat16).to(device)
        x = torch.randn(256, k, generator=gen).to(torch.bfloat16).to(device)
        simt = tiny_gemm.run_kernel(Kernel.SIMT, x, w)
        mma = tiny_gemm.run_kernel(Kernel.MMA, x, w)
        differ = simt != mma
        ulps = (simt.view(torch.int16).int() - mma.view(torch.int16).int()).abs()
        rows_differ = int(differ.any(dim=1).sum())
        lines.append(f"| {n}x{k} | {100 * float(differ.float().mean()):.3f}% | {int(ulps.max())} | {rows_differ}/256 |")
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bisector.kernels.gpu_report",
        description="One measurement session of the kernel stack (tile sweep, GEMM timing, accept length, "
        "SIMT vs MMA, probe, demo bisect); meant for a CUDA machine, runs on the CPU where there is none.",
    )
    parser.add_argument(
        "outdir", nargs="?", default="gpu-report", help="where session.log, summary.md, gemm.json and tiles.json go"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="sweep and timing, accept length good once and bad twice, SIMT vs MMA; no probe, gains or demo",
    )
    return parser.parse_args(argv)


def device_line() -> str:
    """The session's first line: the device every step runs on."""
    import torch

    if torch.cuda.is_available():
        return f"gpu_report: on {torch.cuda.get_device_name()} (CUDA)"
    return (
        "gpu_report: no CUDA device: every step runs on the CPU (CPU kernel twins, the cpu decoder configuration, "
        "no tile sweep, CPU timings)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quick = bool(args.quick)
    where = device_line()
    print(where, flush=True)
    out = Path(args.outdir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.getcwd()}
    summary = [f"# Kernel session {time.strftime('%Y-%m-%d %H:%M')}", "", f"- {where.removeprefix('gpu_report: ')}"]
    smi = shutil.which("nvidia-smi")
    if smi:
        info = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        summary.append(f"- GPU: {info}")
    import torch

    summary.append(f"- python {platform.python_version()}, torch {torch.__version__}, triton {_triton_version()}")

    def save() -> None:
        (out / "summary.md").write_text("\n".join(summary) + "\n")

    gemm_args = ["gemm", "--sweep", "--tiles-out", str(out / "tiles.json"), "--json-out", str(out / "gemm.json")]
    text, _ = _run(out, "gemm", [python, "-m", "bisector.kernels.bench", *gemm_args], env, 240)
    if (out / "tiles.json").exists():
        env["KERNELS_TRITON_TILES"] = (out / "tiles.json").read_text()
        os.environ["KERNELS_TRITON_TILES"] = env["KERNELS_TRITON_TILES"]
    summary += ["", "## Tiny GEMM (sweep + timing)", "```", text.split("device:")[-1].strip()[:3000], "```"]
    save()

    bad_env = {**env, "KERNELS_DISPATCH_OVERRIDE": BAD_TABLE}
    bench = [python, "-m", "bisector.kernels.bench", "accept-length", "--k", "3"]
    runs: list[tuple[str, dict[str, str], list[str]]] = [
        ("good-1", env, []),
        ("bad-1", bad_env, []),
        ("bad-2", bad_env, []),
    ]
    if not quick:
        runs.append(("good-2", env, []))
    summary += ["", "## Accept length", "| run | accept length | wall s |", "| --- | --- | --- |"]
    for name, run_env, extra in runs:
        text, seconds = _run(out, f"accept-{name}", bench + extra, run_env, 120)
        summary.append(f"| {name} {' '.join(extra)} | {_accept(text)} | {seconds:.1f} |")
        save()

    summary += ["", "## SIMT vs MMA (256 rows)", "| shape | bf16 outputs differing | max ulp | rows differing |"]
    summary.append("| --- | --- | --- | --- |")
    try:
        summary += disagreement()
    except Exception as exc:  # report and go on: the later steps are independent
        summary.append(f"failed: {exc!r}")
    if quick:
        save()
        print("\n".join(summary))
        return 0
    probe = [python, "-m", "bisector.kernels.probe", "batch-invariance"]
    probe_good, _ = _run(out, "probe-good", probe, env, 120)
    shapes = ["--shape", "144x7168", "--shape", "896x7168", "--shape", "1536x128"]
    probe_bad, _ = _run(out, "probe-bad", probe + shapes, bad_env, 120)
    summary += ["", "## Probe", "```", probe_good.split("{")[0].strip(), probe_bad.split("{")[0].strip(), "```"]
    save()

    summary += ["", "## Accept length at other gains (bad table)", "| gain | accept length |", "| --- | --- |"]
    for gain in GAINS:
        text, _ = _run(out, f"accept-bad-gain-{gain}", [*bench, "--set", f"gain={gain}"], bad_env, 120)
        summary.append(f"| {gain} | {_accept(text)} |")
        save()

    summary += ["", "## Demo bisect (git bisect run of the bench)"]
    summary += demo_bisect(out, python, env)
    save()
    print("\n".join(summary))
    return 0


def _triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "not installed"
    return str(triton.__version__)


def demo_bisect(out: Path, python: str, env: dict[str, str]) -> list[str]:
    repo = Path("/tmp/gpu-bisect-demo")
    shutil.rmtree(repo, ignore_errors=True)
    text, init_s = _run(out, "demo-init", [python, "-m", "bisector.kernels.demo", "init", str(repo)], env, 60)
    if "[exit 0]" not in text:
        return ["demo init failed; see session.log"]
    script = repo.parent / "gpu-bisect-step.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"out=$({python} -m kernels.bench accept-length --k 3) || exit 125\n"
        'echo "$out" | head -1\n'
        "echo \"$out\" | grep -q '^accept length: 4.0000$'\n"
    )
    script.chmod(0o755)
    start = time.perf_counter()
    steps = []
    for rev in ("demo-good", "main"):
        subprocess.run(["git", "checkout", "-q", rev], cwd=repo, check=True, capture_output=True)
        done = subprocess.run([str(script)], cwd=repo, env=env, capture_output=True, text=True, check=False)
        steps.append(f"{rev}: {done.stdout.strip()} (exit {done.returncode})")
    subprocess.run(["git", "checkout", "-q", "main"], cwd=repo, check=True, capture_output=True)
    subprocess.run(
        ["git", "bisect", "start", "--first-parent", "main", "demo-good"], cwd=repo, check=False, capture_output=True
    )
    done = subprocess.run(
        ["git", "bisect", "run", str(script)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=200,
    )
    wall = time.perf_counter() - start
    with open(out / "session.log", "a", encoding="utf-8") as log:
        log.write(f"\n===== git bisect run ({wall:.1f} s)\n{done.stdout}{done.stderr}")
    found = re.search(r"([0-9a-f]{40}) is the first bad commit", done.stdout)
    culprit = subprocess.run(
        ["git", "log", "--format=%H", "--grep", "mma.sync templates", "main"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return [
        f"- demo init: {init_s:.1f} s; endpoints: {'; '.join(steps)}",
        f"- bisect found {found[1] if found else 'nothing'}; culprit per demo init {culprit}",
        f"- steps run by git bisect: {done.stdout.count('running')}; wall time with the endpoint checks: {wall:.1f} s",
    ]


if __name__ == "__main__":
    sys.exit(main())
