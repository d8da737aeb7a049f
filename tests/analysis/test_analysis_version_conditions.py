"""A library's version in a branch condition (conditions.py, dispatch_sites.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain

ROPE_PY = """\
from .utils import get_te_version, is_te_min_version


def fused_rope(t, freqs, interleaved=False):
    if is_te_min_version("2.3.0.dev0"):
        return te_rope_interleaved(t, freqs, interleaved)
    return te_rope(t, freqs)


class Library:
    def __exit__(self, *args):
        self.lib.unregister()
"""


def test_a_moved_version_bound_is_a_row_and_a_new_version_test_is_none(history: History) -> None:
    history.commit("rope", {"pkg/rope.py": ROPE_PY})
    changed = ROPE_PY.replace('"2.3.0.dev0"', '"2.3.0"').replace(
        "        self.lib.unregister()",
        '        self.lib.unregister()\n        if get_te_version() >= "2.5":\n            self.lib.destroy()',
    )
    sha = history.commit("interleaved rope from TE 2.3.0 on; destroy the library on 2.5", {"pkg/rope.py": changed})

    found = [f for f in explain(history.path, sha).table_findings if f.kind is FindingKind.BRANCH_CONDITION]

    assert [(f.name, f.key, f.before, f.after) for f in found] == [
        ("fused_rope", "version condition", "is_te_min_version('2.3.0.dev0')", "is_te_min_version('2.3.0')")
    ]


ATTENTION_PY = """\
import flash_attn
from flash_attn.flash_attn_interface import _flash_attn_forward


def flash_attn_forward(q, k, v, softmax_scale, causal, window_size):
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** (-0.5)
    block_out, _, _, _, _, block_lse, _, _ = _flash_attn_forward(q, k, v, softmax_scale, causal, window_size)
    return block_out, block_lse
"""

TWO_WAY = """\
    if flash_attn.__version__ <= "2.6.3":
        block_out, _, _, _, _, block_lse, _, _ = _flash_attn_forward(q, k, v, softmax_scale, causal, window_size)
    else:
        block_out, block_lse, _, _ = _flash_attn_forward(q, k, v, softmax_scale, causal, *window_size)
"""


def test_a_version_test_added_as_an_if_else_to_a_function_is_a_row(history: History) -> None:
    history.commit("attention", {"pkg/__init__.py": "", "pkg/attention.py": ATTENTION_PY})
    one_way = ATTENTION_PY.splitlines(keepends=True)[7]  # the one call
    sha = history.commit("flash_attn 2.7", {"pkg/attention.py": ATTENTION_PY.replace(one_way, TWO_WAY)})

    found = [f for f in explain(history.path, sha).table_findings if f.kind is FindingKind.BRANCH_CONDITION]

    assert [(f.name, f.key, f.before, f.after) for f in found] == [
        ("flash_attn_forward", "version condition", None, "flash_attn.__version__ <= '2.6.3'")
    ]


def test_a_function_added_with_a_version_if_else_is_new_code(history: History) -> None:
    history.commit("attention", {"pkg/__init__.py": "", "pkg/attention.py": ATTENTION_PY})
    added = "\n\ndef flash_attn_forward_v2(q, k, v, softmax_scale, causal, window_size):\n" + TWO_WAY
    sha = history.commit("a second entry", {"pkg/attention.py": ATTENTION_PY + added})

    found = [f for f in explain(history.path, sha).table_findings if f.kind is FindingKind.BRANCH_CONDITION]

    assert found == []
