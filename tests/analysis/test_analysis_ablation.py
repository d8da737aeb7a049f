"""benchmarks/bench_explain_ablation.py on a real mirror: each prediction names the rules that made it, "without R"
drops only R's, and switching R off for real (rules_disabled) agrees where no other rule stands in."""

from __future__ import annotations

import json
from pathlib import Path

from analysis_history import History
from bench_explain_ablation import ablation, commit_rows, scores_of

OPS = """\
CONFIGS = [64, 128]


def pick(n):
    if n > 4096:
        return "split"
    return "plain"
"""


def test_the_ablation_scores_each_rule_on_a_mirrored_corpus(tmp_path: Path) -> None:
    history = History(tmp_path / "mirrors" / "acme+ops" / "repo")
    history.commit("ops", {"ops.py": OPS})
    culprit = history.commit("retune", {"ops.py": OPS.replace("[64, 128]", "[64, 256]").replace("4096", "8192")})
    corpus = tmp_path / "corpus_demo.json"
    expected = [{"kind": "table_entry", "file": "ops.py", "name": "CONFIGS*"}]
    corpus.write_text(json.dumps({"commits": [{"repo": "acme/ops", "commit": culprit, "expected": expected}]}))
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    (commit,) = commit_rows(tmp_path / "mirrors", scratch, [corpus])

    assert {rules for unit, rules in commit.units.items() if unit[0] == "table_entry"} == {frozenset({"python_tables"})}
    assert any(unit[0] == "branch_condition" for unit in commit.units)  # the threshold test: a wrong row here
    result = ablation([commit])
    assert result["all_rules"]["pooled"]["found"] == 1
    assert result["rules"]["python_tables"]["without"]["pooled"]["found"] == 0
    assert result["rules"]["python_tables"]["f1_contribution"] > 0
    assert result["rules"]["dispatch_conditions"]["f1_contribution"] < 0  # its row is not in the corpus
    switched_off = scores_of(commit_rows(tmp_path / "mirrors", scratch, [corpus], ["python_tables"]))
    assert switched_off["pooled"] == scores_of([commit], "python_tables")["pooled"]
