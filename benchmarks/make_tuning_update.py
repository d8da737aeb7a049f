"""A repository whose last commit is a GEMM library's tuning update, made from real logic files, for timing
`bisect explain` on it (bench_explain_commits.py).

    python benchmarks/make_tuning_update.py --mirror /work/.mirror/ROCm+rocBLAS/repo --files 40 --out /tmp/tune
    python benchmarks/bench_explain_commits.py --code . --runs 3 /tmp/tune@HEAD

Copies --files Tensile logic files (YAML of --min-kb to --max-kb at the mirror's HEAD, under
library/src/blas3/Tensile/Logic/asm_full) into a new repository, commits them, then changes --edits entries of
each file's exact logic (a solution index, as a retuning does) and commits that: a commit that touches every file
in a few lines, like rocBLAS's tuning updates (which touch tens to hundreds of such files).
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

_EXACT_ENTRY = re.compile(r"^(\s*- \[)(\d+)(, [\d.eE+-]+\]\s*)$")  # [solution index, efficiency] of one size
LOGIC = "library/src/blas3/Tensile/Logic/asm_full/"


def git(*args: str, cwd: Path) -> bytes:
    env = ["-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    done = subprocess.run(["git", *env, *args], cwd=cwd, capture_output=True, check=True)
    return done.stdout


def logic_files(mirror: Path, count: int, min_bytes: int, max_bytes: int) -> list[tuple[str, str]]:
    """(path, blob) of the first count logic YAML files of a size in range at the mirror's HEAD."""
    listing = git("ls-tree", "-r", "-l", "HEAD", LOGIC, cwd=mirror).decode().splitlines()
    chosen = []
    for line in listing:
        meta, path = line.split("\t", 1)
        _, kind, blob, size = meta.split()
        if kind == "blob" and size.isdigit() and path.endswith(".yaml") and min_bytes <= int(size) <= max_bytes:
            chosen.append((path, blob))
        if len(chosen) == count:
            break
    return chosen


def retune(text: str, edits: int) -> str:
    """The last `edits` exact-logic entries of the file point at the next solution index."""
    lines = text.split("\n")
    changed = 0
    for index in range(len(lines) - 1, -1, -1):
        match = _EXACT_ENTRY.match(lines[index])
        if match:
            lines[index] = f"{match.group(1)}{int(match.group(2)) + 1}{match.group(3)}"
            changed += 1
            if changed == edits:
                break
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, required=True, help="A clone of ROCm/rocBLAS (bare or not).")
    parser.add_argument("--out", type=Path, required=True, help="The new repository (must not exist).")
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--min-kb", type=int, default=800)
    parser.add_argument("--max-kb", type=int, default=3000)
    parser.add_argument("--edits", type=int, default=3, help="Exact-logic entries changed in each file.")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"error: {args.out} exists")
    args.out.mkdir(parents=True)
    git("init", "-q", ".", cwd=args.out)
    copied: list[Path] = []
    for path, blob in logic_files(args.mirror, args.files, args.min_kb << 10, args.max_kb << 10):
        try:
            data = git("cat-file", "-p", blob, cwd=args.mirror)
        except subprocess.CalledProcessError:
            continue  # a blob the snapshot lacks (ls-tree gave its size)
        target = args.out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        copied.append(target)
    git("add", "-A", cwd=args.out)
    git("commit", "-qm", "logic files", cwd=args.out)
    for target in copied:
        target.write_text(retune(target.read_text(), args.edits))
    git("commit", "-qam", "retune", cwd=args.out)
    total = sum(target.stat().st_size for target in copied)
    print(f"{args.out}: {len(copied)} logic files, {total / 2**20:.1f} MiB, {args.edits} entries changed in each")


if __name__ == "__main__":
    main()
