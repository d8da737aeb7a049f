"""Precision, recall and time per commit of `bisect explain` (the static diff) over the explain corpus.

    python benchmarks/bench_explain.py --mirrors /work/.mirror [--out results.json]

Reads benchmarks/explain_corpus/corpus.json (repo, commit, expected findings written from each diff) and the
repositories from local mirrors (MIRRORS/<owner>+<name>/repo, bare); nothing is fetched. A prediction is a
distinct (kind, file, name) among the dispatch-relevant rows; it is correct when an expected item matches it
(kind among the item's |-separated kinds, same file, name matching the item's pattern, * matching anything).
Recall counts the expected items matched by some prediction.

`table_entry` and `constant` are the Python kinds of a table entry and a constant (FindingKind); on a C/C++/CUDA
file an item naming them also accepts their native counterparts, `native_array` and `native_threshold`: several
corpora's writers named the concept rather than the language's kind. `--strict-kinds` scores without that.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, cpu_seconds, machine_info, mirror_clone, write_results

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/bench_explain.py` without PYTHONPATH

from bisector.analysis import explain
from bisector.analysis.native import NATIVE_SUFFIXES

CORPUS = Path(__file__).resolve().parent / "explain_corpus" / "corpus.json"


NATIVE_COUNTERPARTS = {"table_entry": "native_array", "constant": "native_threshold"}


def item_kinds(item: dict[str, str], *, strict: bool = False) -> set[str]:
    """The kinds an item accepts: its own, and on a C/C++/CUDA file the native counterparts of the Python ones."""
    kinds = set(item["kind"].split("|"))
    if not strict and item["file"].lower().endswith(NATIVE_SUFFIXES):
        kinds |= {NATIVE_COUNTERPARTS[kind] for kind in kinds & NATIVE_COUNTERPARTS.keys()}
    return kinds


def _matches(item: dict[str, str], unit: tuple[str, str, str], *, strict: bool = False) -> bool:
    kind, file, name = unit
    pattern = re.escape(item["name"]).replace(r"\*", ".*")  # only * is a wildcard: names hold brackets
    return kind in item_kinds(item, strict=strict) and file == item["file"] and re.fullmatch(pattern, name) is not None


def scored(
    units: list[tuple[str, str, str]], expected: list[dict[str, str]], *, strict: bool = False
) -> tuple[list[tuple[str, str, str]], list[dict[str, str]]]:
    """The predictions that match an expected item, and the expected items that some prediction matches."""
    correct = [u for u in units if any(_matches(item, u, strict=strict) for item in expected)]
    found = [item for item in expected if any(_matches(item, u, strict=strict) for u in units)]
    return correct, found


def evaluate(mirrors: Path, scratch: Path, corpus_file: Path = CORPUS, *, strict_kinds: bool = False) -> dict[str, Any]:
    corpus = json.loads(corpus_file.read_text())["commits"]
    rows: list[dict[str, Any]] = []
    for entry in corpus:
        clone = mirror_clone(mirrors, entry["repo"], scratch)
        started, cpu_started = time.perf_counter(), cpu_seconds()
        diff = explain(clone, entry["commit"])
        elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
        units = sorted({(f.kind.value, f.file, f.name) for f in diff.table_findings})
        expected = entry["expected"]
        correct, found = scored(units, expected, strict=strict_kinds)
        rows.append(
            {
                "repo": entry["repo"],
                "commit": entry["commit"],
                "category": entry["category"],
                "seconds": round(elapsed, 3),
                "cpu_seconds": round(cpu, 3),  # this process and its git children: a shared host's load shows less
                "files": diff.changed_file_count,
                "expected": len(expected),
                "found": len(found),
                "predicted": len(units),
                "correct": len(correct),
                "missed": [item for item in expected if item not in found],
                "wrong": [list(u) for u in units if u not in correct],
            }
        )
    predicted = sum(r["predicted"] for r in rows)
    expected_total = sum(r["expected"] for r in rows)
    times = sorted(r["seconds"] for r in rows)
    cpu_times = sorted(r["cpu_seconds"] for r in rows)
    return {
        "machine": machine_info(),
        "commits": len(rows),
        "precision": round(sum(r["correct"] for r in rows) / predicted, 3) if predicted else None,
        "recall": round(sum(r["found"] for r in rows) / expected_total, 3) if expected_total else None,
        "seconds_median": times[len(times) // 2],
        "seconds_max": times[-1],
        "cpu_seconds_median": cpu_times[len(cpu_times) // 2],
        "cpu_seconds_max": cpu_times[-1],
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, required=True, help="Directory of <owner>+<name>/repo mirrors.")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="The corpus file (default: corpus.json).")
    parser.add_argument("--out", type=Path, help="Write the full result as JSON here.")
    parser.add_argument("--strict-kinds", action="store_true", help="No native counterparts of Python kinds.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="explain-corpus-") as scratch:
        result = evaluate(args.mirrors, Path(scratch), args.corpus, strict_kinds=args.strict_kinds)
    if args.out:
        write_results(args.out, result)
    print(missed_and_wrong(result), end="")
    print(summary(result))


def summary(result: dict[str, Any]) -> str:
    """One line: the commits, precision, recall and time per commit."""
    return (
        f"{result['commits']} commits, precision {result['precision']}, recall {result['recall']}, "
        f"{result['seconds_median']} s median, {result['seconds_max']} s max per commit "
        f"(CPU {result['cpu_seconds_median']} s median, {result['cpu_seconds_max']} s max)"
    )


def missed_and_wrong(result: dict[str, Any]) -> str:
    """A line for each commit with a missed item or a wrong row."""
    lines = [
        f"{row['repo']} {row['commit']}: missed {row['missed']} wrong {row['wrong']}\n"
        for row in result["rows"]
        if row["missed"] or row["wrong"]
    ]
    return "".join(lines)


if __name__ == "__main__":
    main()
