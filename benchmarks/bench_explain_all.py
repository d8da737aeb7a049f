"""Every explain corpus in one run: bench_explain.py's result per corpus, and the held-out sets pooled.

    python benchmarks/bench_explain_all.py --mirrors /work/.mirror --out DIR [--skip heldout14] [--only heldout13] \
        [--strict-kinds]

Writes DIR/<corpus>.json (bench_explain's full result) and DIR/<corpus>.txt (its missed and wrong rows) for each
benchmarks/explain_corpus/corpus*.json, and DIR/summary.txt: one line per corpus, then the held-out sets pooled
(every corpus but corpus.json, the one the first rules were written on, and the skipped ones). A blind corpus
kept for a later measurement is left out with --skip, so a round's runs never show its rows to anyone writing rules.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench_explain import CORPUS, evaluate, missed_and_wrong, summary

CORPORA = CORPUS.parent


def corpus_name(path: Path) -> str:
    """corpus_heldout13.json -> heldout13; corpus.json -> corpus."""
    return path.stem.removeprefix("corpus_") if path.stem != "corpus" else "corpus"


def chosen_corpora(skip: list[str], only: list[str]) -> list[Path]:
    paths = sorted(CORPORA.glob("corpus*.json"), key=lambda p: (len(p.stem), p.stem))
    known = {corpus_name(p) for p in paths}
    unknown = sorted(set(skip + only) - known)
    if unknown:
        raise SystemExit(f"error: no corpus named {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return [p for p in paths if corpus_name(p) not in skip and (not only or corpus_name(p) in only)]


def pooled_line(results: dict[str, dict[str, Any]]) -> str | None:
    rows = [row for name, result in results.items() if name != "corpus" for row in result["rows"]]
    predicted, expected = sum(r["predicted"] for r in rows), sum(r["expected"] for r in rows)
    if not rows or not predicted or not expected:
        return None
    precision = sum(r["correct"] for r in rows) / predicted
    recall = sum(r["found"] for r in rows) / expected
    names = ", ".join(name for name in results if name != "corpus")
    return (
        f"held-out pooled ({names}): {len(rows)} commits, {expected} expected items, {predicted} rows, "
        f"precision {precision:.3f}, recall {recall:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, required=True, help="Directory of <owner>+<name>/repo mirrors.")
    parser.add_argument("--out", type=Path, required=True, help="Directory for the per-corpus results.")
    parser.add_argument("--skip", action="append", default=[], help="A corpus to leave out (e.g. heldout14).")
    parser.add_argument("--only", action="append", default=[], help="Run only these corpora (repeatable).")
    parser.add_argument("--strict-kinds", action="store_true", help="No native counterparts of Python kinds.")
    args = parser.parse_args()
    corpora = chosen_corpora(args.skip, args.only)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="explain-corpora-") as scratch:
        for path in corpora:
            name = corpus_name(path)
            results[name] = evaluate(args.mirrors, Path(scratch), path, strict_kinds=args.strict_kinds)
            (args.out / f"{name}.json").write_text(json.dumps(results[name], indent=1))
            (args.out / f"{name}.txt").write_text(missed_and_wrong(results[name]))
            print(f"{name}: {summary(results[name])}", flush=True)
    lines = [f"{name}: {summary(result)}" for name, result in results.items()]
    pooled = pooled_line(results)
    text = "\n".join([*lines, *([pooled] if pooled else []), ""])
    (args.out / "summary.txt").write_text(text)
    if pooled:
        print(pooled)


if __name__ == "__main__":
    main()
