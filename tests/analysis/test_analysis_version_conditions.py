"""A library's version in a branch condition (conditions.py, dispatch_sites.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, static_diff

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

    found = [f for f in static_diff(history.path, sha).table_findings if f.kind is FindingKind.BRANCH_CONDITION]

    assert [(f.name, f.key, f.before, f.after) for f in found] == [
        ("fused_rope", "version condition", "is_te_min_version('2.3.0.dev0')", "is_te_min_version('2.3.0')")
    ]
