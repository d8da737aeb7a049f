"""How far two people's expectations of the same commits agree, against how far `bisect explain` agrees with each.

    python benchmarks/bench_explain_agreement.py --mirrors /work/.mirror \
        --first benchmarks/explain_corpus/corpus_heldout17.json \
        --second benchmarks/explain_corpus/second_reading/corpus_heldout17.json [--out result.json]

A corpus's expectations are one reader's judgement of each diff. A second reader, given the same kinds and the
same commits but not the first reader's file, writes their own; scoring the second reading as if it were a tool
(precision: its items the first reading also has; recall: the first reading's items it also has) measures how
well-defined the task is: a tool cannot be expected to agree with one reader more often than another careful
reader does. Items are compared by file and kind (any kind in common, with the native counterparts of Python
kinds on C/C++ files, as bench_explain.py scores), names aside: second readings name every item '*'. The tool is
scored the same way against both readings, and commits are compared as with / without a dispatch change.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench_explain import evaluate, item_kinds
from common import write_results

Item = dict[str, str]


def _agrees(one: Item, other: Item) -> bool:
    return one["file"] == other["file"] and bool(item_kinds(one) & item_kinds(other))


def reading_against(reference: list[dict[str, Any]], reading: list[dict[str, Any]]) -> dict[str, Any]:
    """The second reading scored as predictions against the first (same commits, by commit id)."""
    by_commit = {entry["commit"]: entry["expected"] for entry in reading}
    missing = [entry["commit"] for entry in reference if entry["commit"] not in by_commit]
    if missing:
        raise SystemExit(f"error: the second reading lacks {len(missing)} commit(s), e.g. {missing[0]}")
    predicted = correct = expected = found = 0
    both_positive = both_negative = only_first = only_second = 0
    for entry in reference:
        first, second = entry["expected"], by_commit[entry["commit"]]
        predicted += len(second)
        correct += sum(1 for item in second if any(_agrees(item, other) for other in first))
        expected += len(first)
        found += sum(1 for item in first if any(_agrees(item, other) for other in second))
        if first and second:
            both_positive += 1
        elif not first and not second:
            both_negative += 1
        elif first:
            only_first += 1
        else:
            only_second += 1
    commits = len(reference)
    observed = (both_positive + both_negative) / commits
    first_rate, second_rate = (both_positive + only_first) / commits, (both_positive + only_second) / commits
    chance = first_rate * second_rate + (1 - first_rate) * (1 - second_rate)
    return {
        "precision": round(correct / predicted, 3) if predicted else None,
        "recall": round(found / expected, 3) if expected else None,
        "items": {"first": expected, "second": predicted},
        "commits": {
            "both with a change": both_positive,
            "both without": both_negative,
            "only the first reading sees one": only_first,
            "only the second reading sees one": only_second,
        },
        "commit_agreement": round(observed, 3),
        "commit_kappa": round((observed - chance) / (1 - chance), 3) if chance < 1 else None,
    }


def _names_aside(corpus_file: Path, folder: Path) -> Path:
    """The corpus with every item's name '*', for scoring by file and kind only."""
    data = json.loads(corpus_file.read_text())
    for entry in data["commits"]:
        entry["expected"] = [{**item, "name": "*"} for item in entry["expected"]]
    out = folder / f"names-aside-{corpus_file.parent.name}-{corpus_file.name}"
    out.write_text(json.dumps(data))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, required=True, help="Directory of <owner>+<name>/repo mirrors.")
    parser.add_argument("--first", type=Path, required=True, help="A corpus file (the first reading).")
    parser.add_argument("--second", type=Path, required=True, help="The same commits read by someone else.")
    parser.add_argument("--out", type=Path, help="Write the result as JSON here.")
    args = parser.parse_args()
    first = json.loads(args.first.read_text())["commits"]
    second = json.loads(args.second.read_text())["commits"]
    result: dict[str, Any] = {"commits": len(first), "second_against_first": reading_against(first, second)}
    with tempfile.TemporaryDirectory(prefix="explain-agreement-") as scratch:
        for name, corpus in (("first", args.first), ("second", args.second)):
            scored = evaluate(args.mirrors, Path(scratch), _names_aside(corpus, Path(scratch)))
            result[f"tool_against_{name}"] = {"precision": scored["precision"], "recall": scored["recall"]}
    if args.out:
        write_results(args.out, result)
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
