"""A condition whose branches only log (once) or cast a value in place chooses no kernel (unreached.py), on a real
git history."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, static_diff

QLINEAR_PY = """\
import torch


class QuantLinear(torch.nn.Module):
    def forward(self, x):
        out = ext_q4_matmul(x.half(), self.q4)
        return out

    def backward(self, x):
        return ext_q4_grad(x, self.q4)
"""


def test_a_dtype_condition_that_casts_in_place_and_warns_once_is_no_row(history: History) -> None:
    history.commit("qlinear", {"pkg/qlinear.py": QLINEAR_PY})
    changed = QLINEAR_PY.replace(
        "        out = ext_q4_matmul(x.half(), self.q4)\n",
        "        if x.dtype != torch.float16:\n            logger.warning_once('casting to float16')\n"
        "            x = x.half()\n        out = ext_q4_matmul(x, self.q4)\n",
    ).replace(
        "        return ext_q4_grad(x, self.q4)\n",
        "        if x.dtype != torch.float16:\n            return ext_q4_grad_fp32(x, self.q4)\n"
        "        return ext_q4_grad(x, self.q4)\n",
    )
    sha = history.commit("cast non-fp16 inputs with a warning; an fp32 gradient kernel", {"pkg/qlinear.py": changed})

    found = [f for f in static_diff(history.path, sha).table_findings if f.kind is FindingKind.BRANCH_CONDITION]

    # forward runs the same kernel on the cast input; backward picks another kernel
    assert [f.name for f in found] == ["QuantLinear.backward"]
