"""Can a learned judgement of which changed files hold a dispatch change lift the static diff on unseen projects?

    python benchmarks/bench_explain_file_gate.py --mirrors /work/.mirror [--out result.json]

For every changed file of every corpus commit: the static diff's rows in it, the diff's added and removed lines
(how many test, compare or name an arch, a dtype, an env var, a launch shape, a number, a config word, a check)
and the commit message's words. A logistic regression (class-balanced, L2) learns from the other corpora whether
a file holds an expected item (leave one corpus out: a corpus is scored by a model that never saw it). Then the
rows of files it judges unlikely are dropped (the gate) and, in files it judges likely where the diff gave no row,
one row is added (the fallback, of the kind most often expected for that sort of file). Precision and recall are
scored as bench_explain.py scores them, pooled over the held-out corpora, for a grid of the two thresholds.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from bench_explain import CORPUS, _matches
from common import machine_info, mirror_clone, write_results

from bisector.analysis import explain
from bisector.analysis.native import NATIVE_SUFFIXES

KINDS = ("table_entry", "constant", "autotune_config", "heuristic", "tuning_file", "native_array",
         "native_threshold", "dispatch_logic", "launch_param", "branch_condition", "env_gate")  # fmt: skip
WORDS = {
    "test": r"\b(if|elif|else if|switch|case|while)\b|\?",
    "arch": r"sm_?\d|gfx\d|capabilit|cc_major|\bmajor\b|is_hip|\bhip\b|rocm|__CUDA_ARCH__|\barch|avx|neon|sve|amx",
    "dtype": r"dtype|fp16|bf16|half|float16|bfloat16|fp8|e4m3|int8|int4|float32|fp32|scalar_type",
    "env": r"environ|getenv|\benv\b",
    "launch": r"num_warps|num_stages|BLOCK_|\bgrid\b|blockDim|<<<|threads|warps|waves|split_?k|tile",
    "number": r"(?<![\w.])\d+(?![\w.])",
    "config": r"config|tune|heuristic|dispatch|backend|kernel|impl|select|choose|algo|strategy|default",
    "check": r"assert|CHECK|raise|throw|error|warn|log|print",
    "targets": r"ARCHITECTURES|gencode|TARGETS|compute_\d+|offload-arch",
}
MESSAGE_WORDS = {
    "fix": r"\bfix|bug|typo|crash|leak|warning",
    "refactor": r"refactor|clean|rename|move|format|lint|style|doc|comment|test|\bci\b",
    "tuning": r"perf|tun|speed|fast|optimi|heuristic|dispatch|select|enable|disable|support|default|threshold|config",
}
USERS_PATH = re.compile(r"(^|/)(tests?|docs?|examples?|benchmarks?|third_party|\.github|scripts?)(/|$)|test_", re.I)
FALLBACK_KIND = {"native": "branch_condition", "python": "branch_condition", "build": "native_array",
                 "config": "tuning_file", "other": "branch_condition"}  # fmt: skip


def file_sort(path: str) -> str:
    lower = path.lower()
    if lower.endswith(NATIVE_SUFFIXES):
        return "native"
    if lower.endswith((".py", ".pyx")):
        return "python"
    if "cmake" in lower or lower.endswith(("setup.py", "makefile", ".bzl", ".bazel", ".mk")):
        return "build"
    if lower.endswith((".json", ".yaml", ".yml", ".toml", ".csv", ".ini")):
        return "config"
    return "other"


def changed_lines(clone: Path, commit: str) -> tuple[str, dict[str, list[str]]]:
    """The commit message and each changed file's added and removed lines (no context)."""
    show = ["show", "--format=%B%x00", "-U0", "--no-color", "--no-renames", f"{commit}^{{commit}}"]
    # check=False: a snapshot may lack a large blob; git then stops there and the files before it are kept
    shown = subprocess.run(["git", "-C", str(clone), *show], capture_output=True, text=True, errors="replace").stdout
    message, _, patch = shown.partition("\x00")
    files: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            lines = files.setdefault(line.split(" b/", 1)[-1], [])
        elif line[:1] in "+-" and not line.startswith(("+++", "---")) and len(lines) < 3000:
            lines.append(line[:300])
    return message.strip(), files


def features(units: list[tuple[str, str, str]], path: str, lines: list[str], message: str, files: int) -> list[float]:
    kinds = Counter(kind for kind, file, _ in units if file == path)
    row = [math.log1p(kinds[kind]) for kind in KINDS] + [float(sum(kinds.values()) > 0)]
    row += [float(file_sort(path) == sort) for sort in FALLBACK_KIND] + [float(bool(USERS_PATH.search(path)))]
    added, removed = [x for x in lines if x[0] == "+"], [x for x in lines if x[0] == "-"]
    row += [math.log1p(len(added)), math.log1p(len(removed))]
    for pattern in WORDS.values():
        plus, minus = (sum(1 for x in side if re.search(pattern, x, re.I)) for side in (added, removed))
        row += [math.log1p(plus), math.log1p(minus), math.log1p(min(plus, minus))]
    row += [math.log1p(files), math.log1p(len(units))]
    return row + [float(bool(re.search(p, message[:200], re.I))) for p in MESSAGE_WORDS.values()]


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 3000) -> tuple[np.ndarray, ...]:
    mean, scale = x.mean(0), x.std(0) + 1e-6
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    weights = np.zeros(z.shape[1])
    balance = np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean()))
    for _ in range(steps):
        p = 1 / (1 + np.exp(-z @ weights))
        weights -= (z.T @ (balance * (p - y)) + l2 * np.r_[weights[:-1], 0]) / len(y)
    return mean, scale, weights


def predict(model: tuple[np.ndarray, ...], x: np.ndarray) -> np.ndarray:
    mean, scale, weights = model
    likely: np.ndarray = 1 / (1 + np.exp(-np.hstack([(x - mean) / scale, np.ones((len(x), 1))]) @ weights))
    return likely


def collect(mirrors: Path) -> list[dict[str, Any]]:
    commits = []
    with tempfile.TemporaryDirectory(prefix="explain-gate-") as scratch:
        for path in sorted(CORPUS.parent.glob("corpus*.json")):
            for entry in json.loads(path.read_text())["commits"]:
                clone = mirror_clone(mirrors, entry["repo"], Path(scratch))
                units = sorted({(f.kind.value, f.file, f.name) for f in explain(clone, entry["commit"]).table_findings})
                message, files = changed_lines(clone, entry["commit"])
                commits.append({**entry, "corpus": path.stem, "units": units, "message": message, "files": files})
    return commits


def score(
    commits: list[dict[str, Any]], likely: dict[tuple[int, str], float], gate: float, fallback: float
) -> dict[str, Any]:
    predicted = correct = expected = found = 0
    for index, commit in enumerate(commits):
        rows: set[tuple[str, str, str]] = set()
        for path in commit["files"]:
            own = {(kind, file, name) for kind, file, name in commit["units"] if file == path}
            p = likely[(index, path)]
            if own and p >= gate:
                rows |= own
            elif not own and p >= fallback:
                rows.add((FALLBACK_KIND[file_sort(path)], path, "*"))
        predicted += len(rows)
        correct += sum(1 for r in rows if any(_matches(item, r) for item in commit["expected"]))
        expected += len(commit["expected"])
        found += sum(1 for item in commit["expected"] if any(_matches(item, r) for r in rows))
    return {"gate": gate, "fallback": fallback, "precision": round(correct / predicted, 3),
            "recall": round(found / expected, 3), "rows": predicted}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, required=True, help="Directory of <owner>+<name>/repo mirrors.")
    parser.add_argument("--out", type=Path, help="Write the result as JSON here.")
    args = parser.parse_args()
    commits = collect(args.mirrors)
    keys = [(i, path) for i, c in enumerate(commits) for path in c["files"]]
    x = np.array([features(commits[i]["units"], p, commits[i]["files"][p], commits[i]["message"],
                           len(commits[i]["files"])) for i, p in keys])  # fmt: skip
    y = np.array([float(any(item["file"] == p for item in commits[i]["expected"])) for i, p in keys])
    corpus_of = np.array([commits[i]["corpus"] for i, _ in keys])
    likely: dict[tuple[int, str], float] = {}
    for corpus in sorted(set(corpus_of)):
        held_out = corpus_of == corpus
        for key, p in zip([k for k, h in zip(keys, held_out, strict=True) if h],
                          predict(fit(x[~held_out], y[~held_out]), x[held_out]), strict=True):  # fmt: skip
            likely[key] = float(p)
    held = [i for i, c in enumerate(commits) if c["corpus"] != "corpus"]
    pooled = [commits[i] for i in held]
    renumbered = {i: j for j, i in enumerate(held)}
    pooled_likely = {(renumbered[i], p): v for (i, p), v in likely.items() if i in renumbered}
    # gate 0.0 with fallback 1.1 is the static diff alone
    grid = [score(pooled, pooled_likely, g, f) for g in (0.0, 0.5, 0.7, 0.8, 0.9) for f in (0.6, 0.7, 0.8, 0.9, 1.1)]
    result = {"machine": machine_info(), "files": len(keys), "files_with_items": int(y.sum()), "grid": grid}
    if args.out:
        write_results(args.out, result)
    for line in grid:
        print(f"gate {line['gate']:.1f} fallback {line['fallback']:.1f}: precision {line['precision']:.3f}, "
              f"recall {line['recall']:.3f}, {line['rows']} rows")  # fmt: skip


if __name__ == "__main__":
    main()
