"""A top-level class or function renamed with the same code is no change (top_level.py), on a real git history."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import explain

EXPERTS_PY = """\
import torch


class KMisrtalSparseMoEBlock(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] < 10 and torch.cuda.is_available():
            return self.forward_small(x)
        return self.forward_large(x)


class KDeepseekMoE(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] < 10:
            return self.forward_small(x)
        return self.forward_large(x)
"""


def test_a_class_renamed_with_the_same_code_gives_no_rows(history: History) -> None:
    history.commit("experts", {"pkg/experts.py": EXPERTS_PY})
    changed = (
        EXPERTS_PY.replace("KMisrtalSparseMoEBlock", "KMistralSparseMoEBlock")
        .replace("KDeepseekMoE", "KDeepseekV2MoE")
        .replace("        if x.shape[0] < 10:\n", "        if x.shape[0] < 16:\n")
    )
    sha = history.commit("spelling of Mistral; DeepSeek V2 takes the small path further", {"pkg/experts.py": changed})

    # the Mistral block is the same code under a new name; the DeepSeek one changed its threshold too
    assert sorted(f.name for f in explain(history.path, sha).table_findings) == [
        "KDeepseekMoE.forward",
        "KDeepseekV2MoE.forward",
    ]
