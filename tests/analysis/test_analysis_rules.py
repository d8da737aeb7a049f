"""The rules' table: every dispatch row of the static diff names the declared rule that made it, and a rule switched
off for a measurement makes no rows."""

from __future__ import annotations

import pytest
from analysis_history import History

from bisector.analysis import FindingKind, explain
from bisector.analysis.rules import RULE_NAMES, RULES, rules_disabled

GEMM_BEFORE = """\
import os
import triton

_TUNED_MIN_M = {(4096, 4096): 2}


def pick(m, n, k):
    if os.environ.get("GEMM_FORCE_MMA", "0") == "1":
        return "mma"
    if m >= _TUNED_MIN_M.get((n, k), 16):
        return "mma"
    return "simt"
"""

GEMM_AFTER = GEMM_BEFORE.replace("{(4096, 4096): 2}", "{(4096, 4096): 2, (144, 7168): 2}").replace(
    '"GEMM_FORCE_MMA", "0"', '"GEMM_FORCE_MMA", "1"'
)


def _commit(history: History) -> str:
    history.commit(
        "gemm", {"gemm/ops.py": GEMM_BEFORE, "gemm/__init__.py": "", "src/gemm.cu": "const int kMinM = 16;\n"}
    )
    return history.commit("retune", {"gemm/ops.py": GEMM_AFTER, "src/gemm.cu": "const int kMinM = 32;\n"})


def test_every_dispatch_row_names_the_declared_rule_that_made_it(history: History) -> None:
    rows = explain(history.path, _commit(history)).table_findings

    assert {(f.kind, f.name, f.rule) for f in rows} == {
        (FindingKind.TABLE_ENTRY, "_TUNED_MIN_M", "python_tables"),
        (FindingKind.ENV_GATE, "GEMM_FORCE_MMA", "env_gates"),
        (FindingKind.BRANCH_CONDITION, "pick", "dispatch_conditions"),
        (FindingKind.NATIVE_THRESHOLD, "kMinM", "native_tables"),
    }
    assert len({rule.name for rule in RULES}) == len(RULES) == len(RULE_NAMES)


def test_a_rule_switched_off_makes_no_rows_and_the_others_are_unchanged(history: History) -> None:
    sha = _commit(history)
    every = explain(history.path, sha).table_findings

    with rules_disabled(["env_gates"]):
        without = explain(history.path, sha).table_findings

    assert without == tuple(f for f in every if f.rule != "env_gates")
    assert explain(history.path, sha).table_findings == every  # only inside the block
    with pytest.raises(ValueError, match=r"no rule named env_gate$"), rules_disabled(["env_gate"]):
        pass
