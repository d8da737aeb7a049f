"""Each rule's contribution to the static diff's precision, recall and F1, over every explain corpus.

    python benchmarks/bench_explain_ablation.py --mirrors /work/.mirror --out ablation.json \\
        [--only heldout13] [--skip heldout14] [--check native_choosers ...] [--table]

Runs the static diff once per corpus commit with every rule on (bisector/analysis/rules.py: RULES), each row
naming the rule that made it, and scores "without rule R" by dropping the predictions only R made (a prediction is
bench_explain.py's distinct (kind, file, name); one that another rule makes too stays). Scoring is
bench_explain.py's. Rules with passes over
other rules' rows can interact (and a file left without rows gets rows of last resort), so `--check RULE` also runs
every commit again with RULE really switched off (`rules_disabled`; `--check a,b` switches off a and b together)
and records both numbers. Writes the JSON to --out: for every rule its predictions, and the pooled (all corpora)
and per-corpus precision, recall and F1 with and without it; each commit's predictions with the rules that made
them; the checks. `--table` prints Markdown tables: per corpus, then the rules, most useful first.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_explain import scored
from bench_explain_all import chosen_corpora, corpus_name
from common import ROOT, machine_info, mirror_clone

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bisector.analysis import explain
from bisector.analysis.rules import RULES, rules_disabled

Unit = tuple[str, str, str]  # (kind, file, name): one prediction


@dataclass
class CommitRows:
    corpus: str
    repo: str
    commit: str
    expected: list[dict[str, str]]
    units: dict[Unit, frozenset[str]]  # each prediction and the rules that made it

    def to_json(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus,
            "repo": self.repo,
            "commit": self.commit,
            "units": [[*unit, sorted(rules)] for unit, rules in sorted(self.units.items())],
        }


@dataclass
class Tally:
    correct: int = 0
    predicted: int = 0
    found: int = 0
    expected: int = 0

    def add(self, units: Iterable[Unit], expected: list[dict[str, str]]) -> None:
        chosen = sorted(set(units))
        correct, found = scored(chosen, expected)
        self.correct += len(correct)
        self.predicted += len(chosen)
        self.found += len(found)
        self.expected += len(expected)

    def scores(self) -> dict[str, float | int]:
        precision = self.correct / self.predicted if self.predicted else 0.0
        recall = self.found / self.expected if self.expected else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(f1, 4),
            "correct": self.correct,
            "predicted": self.predicted,
            "found": self.found,
            "expected": self.expected,
        }


def commit_rows(mirrors: Path, scratch: Path, corpora: list[Path], disabled: Iterable[str] = ()) -> list[CommitRows]:
    rows = []
    for path in corpora:
        for entry in json.loads(path.read_text())["commits"]:
            clone = mirror_clone(mirrors, entry["repo"], scratch)
            with rules_disabled(disabled):
                diff = explain(clone, entry["commit"])
            units: dict[Unit, set[str]] = {}
            for finding in diff.table_findings:
                units.setdefault((finding.kind.value, finding.file, finding.name), set()).add(finding.rule)
            rows.append(
                CommitRows(
                    corpus_name(path),
                    entry["repo"],
                    entry["commit"],
                    entry["expected"],
                    {unit: frozenset(rules) for unit, rules in units.items()},
                )
            )
        print(f"{corpus_name(path)}: {sum(r.corpus == corpus_name(path) for r in rows)} commits", file=sys.stderr)
    return rows


def without(commit: CommitRows, left_out: frozenset[str]) -> set[Unit]:
    """The commit's predictions with the rules left_out dropped."""
    return {unit for unit, rules in commit.units.items() if rules - left_out}


def scores_of(commits: list[CommitRows], *left_out: str) -> dict[str, Any]:
    """Pooled and per-corpus scores with the rules left_out dropped (none: every rule on)."""
    pooled, per_corpus = Tally(), dict[str, Tally]()
    for commit in commits:
        units = without(commit, frozenset(left_out))
        pooled.add(units, commit.expected)
        per_corpus.setdefault(commit.corpus, Tally()).add(units, commit.expected)
    return {"pooled": pooled.scores(), "corpora": {name: tally.scores() for name, tally in per_corpus.items()}}


def ablation(commits: list[CommitRows]) -> dict[str, Any]:
    every = scores_of(commits)
    result: dict[str, Any] = {"all_rules": every, "rules": {}}
    for rule in RULES:
        made = sum(rule.name in rules for commit in commits for rules in commit.units.values())
        alone = sum(rules == {rule.name} for commit in commits for rules in commit.units.values())
        scores = scores_of(commits, rule.name)
        result["rules"][rule.name] = {
            "reader": rule.reader,
            "finds": rule.finds,
            "predictions": made,
            "alone": alone,  # predictions no other rule makes
            "without": scores,
            "f1_contribution": round(every["pooled"]["f1"] - scores["pooled"]["f1"], 4),
        }
    return result


def corpus_table(result: dict[str, Any]) -> str:
    """Precision, recall and F1 of every rule together, per corpus and pooled."""
    lines = [
        "| corpus | precision | recall | F1 | predictions correct / made | items found / expected |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    every = result["all_rules"]
    for name, scores in [*every["corpora"].items(), ("**pooled**", every["pooled"])]:
        lines.append(
            f"| {name} | {scores['precision']:.3f} | {scores['recall']:.3f} | {scores['f1']:.3f} | "
            f"{scores['correct']} / {scores['predicted']} | {scores['found']} / {scores['expected']} |"
        )
    return "\n".join(lines) + "\n"


def table(result: dict[str, Any]) -> str:
    every = result["all_rules"]["pooled"]
    lines = [
        f"All rules: precision {every['precision']:.3f}, recall {every['recall']:.3f}, F1 {every['f1']:.3f} "
        f"({every['correct']} / {every['predicted']} predictions, {every['found']} / {every['expected']} items).",
        "",
        "| rule | reader | predictions (alone) | without it: precision / recall / F1 | F1 contribution, points |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    ranked = sorted(result["rules"].items(), key=lambda item: -item[1]["f1_contribution"])
    for name, rule in ranked:
        pooled = rule["without"]["pooled"]
        made = f"{rule['predictions']} ({rule['alone']})"
        lines.append(
            f"| {name} | {rule['reader']} | {made} | {pooled['precision']:.3f} / {pooled['recall']:.3f} / "
            f"{pooled['f1']:.3f} | {100 * rule['f1_contribution']:+.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, required=True, help="Directory of <owner>+<name>/repo mirrors.")
    parser.add_argument("--out", type=Path, required=True, help="Write the JSON result here.")
    parser.add_argument("--skip", action="append", default=[], help="A corpus to leave out (e.g. heldout14).")
    parser.add_argument("--only", action="append", default=[], help="Run only these corpora (repeatable).")
    parser.add_argument(
        "--check", action="append", default=[], help="Also run with these rules (comma-separated) really off."
    )
    parser.add_argument("--table", action="store_true", help="Print the Markdown table of the rules.")
    args = parser.parse_args()
    corpora = chosen_corpora(args.skip, args.only)
    unknown = sorted({rule for check in args.check for rule in check.split(",")} - {rule.name for rule in RULES})
    if unknown:
        raise SystemExit(f"error: no rule named {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="explain-ablation-") as scratch:
        commits = commit_rows(args.mirrors, Path(scratch), corpora)
        result = {"machine": machine_info(), "corpora": [corpus_name(p) for p in corpora], **ablation(commits)}
        result["unnamed"] = sorted({f"{u}" for c in commits for u, rules in c.units.items() if "" in rules})
        result["commits"] = [commit.to_json() for commit in commits]
        checks = {}
        for check in args.check:
            rules = check.split(",")
            really = scores_of(commit_rows(args.mirrors, Path(scratch), corpora, rules))
            checks[check] = {"dropped_rows": scores_of(commits, *rules), "switched_off": really}
            print(f"{check}: dropped rows {checks[check]['dropped_rows']['pooled']}", file=sys.stderr)
            print(f"{check}: switched off {really['pooled']}", file=sys.stderr)
        result["checks"] = checks
    args.out.write_text(json.dumps(result, indent=1))
    if args.table:
        print(corpus_table(result), table(result), sep="\n", end="")


if __name__ == "__main__":
    main()
