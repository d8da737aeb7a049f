"""A fingerprint of `bisect explain`'s whole static diff per corpus commit, to show that a change to the analysis
keeps every row (or to list the commits whose rows it changes).

    PYTHONHASHSEED=0 python benchmarks/explain_identity.py --code TREE --mirrors /work/.mirror --out FILE \
        [--corpus benchmarks/explain_corpus/corpus_heldout5.json ...]

Loads the static diff from --code (a checkout of gpu-bisect), diffs every commit of the corpora (default: every
`corpus*.json` of this checkout) against its first parent and writes, per "corpus:repo:commit", the first 16 hex
digits of the sha256 of the rows and notes in order, and the CPU seconds it took. Compare two outputs with
`--compare OLD NEW`. Run with PYTHONHASHSEED=0: the order of a few rows follows string hashing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from common import cpu_seconds, mirror_clone, write_results

CORPORA = Path(__file__).resolve().parent / "explain_corpus"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, help="The gpu-bisect checkout whose analysis runs.")
    parser.add_argument("--mirrors", type=Path, help="Directory of <owner>+<name>/repo mirrors.")
    parser.add_argument("--corpus", type=Path, action="append", help="A corpus file (repeatable).")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("OLD", "NEW"), help="List the commits that differ.")
    args = parser.parse_args()
    if args.compare:
        old, new = (json.loads(path.read_text()) for path in args.compare)
        differ = sorted(key for key in old.keys() | new.keys() if old.get(key, [None])[0] != new.get(key, [None])[0])
        print(f"{len(old)} / {len(new)} commits, {len(differ)} differ", *differ, sep="\n")
        sys.exit(1 if differ else 0)
    if not (args.code and args.mirrors and args.out):
        parser.error("--code, --mirrors and --out are needed (or --compare OLD NEW)")
    sys.path.insert(0, str(args.code.resolve()))
    from bisector.analysis import explain

    result: dict[str, tuple[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for corpus in args.corpus or sorted(CORPORA.glob("corpus*.json")):
            for entry in json.loads(corpus.read_text())["commits"]:
                clone = mirror_clone(args.mirrors, entry["repo"], Path(scratch))
                started = cpu_seconds()
                try:
                    diff = explain(clone, entry["commit"])
                    text = repr(diff.findings)
                except Exception as error:  # an error is a result to compare too
                    text = f"error {error!r}"
                digest = hashlib.sha256(text.encode()).hexdigest()[:16]
                seconds = round(cpu_seconds() - started, 3)
                result[f"{corpus.name}:{entry['repo']}:{entry['commit']}"] = (digest, seconds)
    write_results(args.out, result)
    print(f"{len(result)} commits; {sum(seconds for _, seconds in result.values()):.1f} CPU seconds")


if __name__ == "__main__":
    main()
