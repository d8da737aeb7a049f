"""What a worker's checkout costs per step in a repository of thousands of files, against a 2 s test.

#14 removed the in-process libgit2 checkout unless it gained over 2 % of wall time on a 5000+ file repository
with a 2 s test. git's own checkout + clean per step is an upper bound on any such gain: this measures it.

    python benchmarks/bench_checkout.py [--files 6000] [--commits 40] [--test-s 2.0] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_checkout.py` without PYTHONPATH

from benchmarks.common import machine_info, write_results  # noqa: E402
from bisector.vocab.gitrepo import GitRepo  # noqa: E402


def git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_repo(path: Path, files: int, commits: int) -> list[str]:
    """files source files in 60 directories; each later commit edits three of them, as a typical PR does."""
    git(path.parent, "init", "-q", "-b", "main", str(path))
    stream: list[str] = []
    for index in range(files):
        content = f"# module {index}\n" + "x = 1\n" * 40
        stream += ["blob", f"mark :{index + 2}", f"data {len(content.encode())}", content]
    stream += ["commit refs/heads/main", "committer b <b@example.com> 1700000000 +0000", "data 4", "base"]
    stream += [f"M 100644 :{index + 2} pkg{index % 60}/mod{index}.py" for index in range(files)]
    stream.append("")
    for number in range(1, commits):
        stream += ["commit refs/heads/main", f"committer b <b@example.com> {1700000000 + number} +0000", "data 4"]
        stream.append(f"{number:04d}")
        for edit in range(3):
            index = (number * 97 + edit * 31) % files
            content = f"# module {index} edited in {number}\n"
            stream.append(f"M 100644 inline pkg{index % 60}/mod{index}.py")
            stream += [f"data {len(content.encode())}", content]
        stream.append("")
    stream.append("done")
    git(path, "fast-import", "--quiet", "--done", stdin="\n".join(stream) + "\n")
    git(path, "checkout", "-q", "-f", "main")
    return git(path, "rev-list", "--reverse", "main").split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=6000)
    parser.add_argument("--commits", type=int, default=40)
    parser.add_argument("--test-s", type=float, default=2.0)
    parser.add_argument("--out", "--json", dest="out", type=Path, help="Also write the JSON result here.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        repo_path = Path(scratch) / "repo"
        shas = make_repo(repo_path, args.files, args.commits)
        repo = GitRepo(repo_path)
        worktree = Path(scratch) / "slot-0"
        repo.ensure_worktree(worktree, shas[0])
        order = [shas[(i * 7) % len(shas)] for i in range(len(shas))]  # bisect-like jumps, not neighbours
        costs_ms = []
        for sha in order:
            (worktree / "left-by-the-test.txt").write_text("x")
            started = time.perf_counter()
            repo.clean_worktree(worktree)
            repo.ensure_worktree(worktree, sha, clean=False)
            costs_ms.append((time.perf_counter() - started) * 1000)
    median = statistics.median(costs_ms)
    result = {
        "files": args.files,
        "steps": len(costs_ms),
        "checkout_and_clean_ms": {"median": round(median, 1), "max": round(max(costs_ms), 1)},
        "share_of_test": round(median / (args.test_s * 1000), 4),
        "machine": machine_info(),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        write_results(args.out, result)


if __name__ == "__main__":
    main()
