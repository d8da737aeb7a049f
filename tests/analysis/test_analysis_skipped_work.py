"""Work the scans leave out, and what still makes rows (real git histories): the methods a commit leaves as they
were are not scanned on either side (top_level.same_methods), but what such a method's scan reads from outside
it, the gates before it and whether its callees launch, still counts; env gates are looked for only in the
statements whose lines mention env, when the lines are the parser's lines."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain

OP_PY = """\
import triton

from pkg.arch import get_arch


@triton.jit
def _kernel(x, BLOCK: tl.constexpr):
    pass


class Op:
    use_tc = get_arch() == "sm90"

    def forward(self, x, variant):
        block = 32 if variant == "narrow" else 64
        warps = 4 if variant == "narrow" else 8
        self._run(x, block)
        self._prepare(x, warps)

    def pick(self, x):
        fast = not use_tc
        return fast

    def _run(self, x, block):
        _kernel[(1,)](x, BLOCK=block)

    def _prepare(self, x, warps):
        return x

    def describe(self):
        return "op"
"""


def branch_rows(history: History, sha: str) -> list[tuple[str, str, str | None, str | None]]:
    found = explain(history.path, sha).findings
    return [(f.name, f.key, f.before, f.after) for f in found if f.kind is FindingKind.BRANCH_CONDITION]


def test_a_method_of_the_same_text_shows_the_launch_choice_its_changed_callee_makes(history: History) -> None:
    history.commit("op", {"pkg/__init__.py": "", "pkg/op.py": OP_PY})
    launching = OP_PY.replace("        return x\n", "        _kernel[(1,)](x, BLOCK=64, num_warps=warps)\n", 1)
    sha = history.commit("_prepare launches the kernel", {"pkg/op.py": launching})

    # forward is unchanged, but the test that chose its block now chooses the warps of _prepare's launch too
    expected = ("Op.forward", "launch condition", "variant == 'narrow'", "warps = ... if variant == 'narrow' else ...")
    assert expected in branch_rows(history, sha)


def test_a_method_of_the_same_text_shows_a_gate_that_changed_before_it(history: History) -> None:
    history.commit("op", {"pkg/__init__.py": "", "pkg/op.py": OP_PY})
    ungated = OP_PY.replace('use_tc = get_arch() == "sm90"', "use_tc = True")
    sha = history.commit("tensor cores always", {"pkg/op.py": ungated})

    # pick is unchanged; the class-level gate it reads (an arch condition) is gone, so its stored condition is too
    assert ("Op.pick", "arch condition", "fast = not use_tc", None) in branch_rows(history, sha)


def test_methods_of_the_same_text_in_a_changed_class_give_no_rows(history: History) -> None:
    history.commit("op", {"pkg/__init__.py": "", "pkg/op.py": OP_PY})
    renamed = OP_PY.replace('return "op"', 'return "operator"')
    sha = history.commit("describe says operator", {"pkg/op.py": renamed})

    assert branch_rows(history, sha) == []


FLAGS_PY = 'import os\n\nX = 1\f\n\n\ndef fast():\n    return os.environ.get("LIB_FAST", "0") == "1"\n'


def test_an_env_read_after_a_form_feed_is_a_gate(history: History) -> None:
    # str.splitlines breaks lines at the form feed too, so the source's lines are not the parser's lines there
    history.commit("flags", {"pkg/__init__.py": "", "pkg/flags.py": FLAGS_PY})
    sha = history.commit("fast by default", {"pkg/flags.py": FLAGS_PY.replace('"0"', '"1"')})

    found = explain(history.path, sha).findings

    assert [(f.name, f.before, f.after) for f in found if f.kind is FindingKind.ENV_GATE] == [
        (
            "LIB_FAST",
            "os.environ.get('LIB_FAST', '0') == '1' (in fast)",
            "os.environ.get('LIB_FAST', '1') == '1' (in fast)",
        )
    ]


# A long class whose commits change one method: the scans that need a word on a line (env reads, option
# registries, arch targets) walk only the parts of it on such lines, so each find below sits where that cut could
# lose it (a decorator above its def's line, a read whose variable is on another line than its word, a loop header
# of several lines, a keyword's arch list on the line after its name).
BACKEND_PY = """\
import os

import torch
from pkg.knobs import Knob


class Backend:
    SPLIT = Knob(
        "split_k",
        default=4,
    )

    @torch.compile(disable=os.environ.get("BACKEND_NO_COMPILE", "0") == "1")
    def forward(self, x):
        return x

    def flags(self):
        fast = os.environ.get(
            "BACKEND_FAST", "0"
        )
        return fast

    def targets(self):
        found = []
        for target in [
            "sm_80", "sm_90",
        ]:
            found.append(target)
        return dict(
            arch_list=
            "sm_80;sm_90",
        ), found

    def describe(self):
        return "backend"
"""


def _rows(history: History, sha: str) -> set[tuple[str, str, str, str | None, str | None]]:
    found = explain(history.path, sha).findings
    return {(f.kind.value, f.name, f.key, f.before, f.after) for f in found}


def test_an_env_read_in_a_decorator_of_a_long_classs_method_is_a_gate(history: History) -> None:
    history.commit("backend", {"pkg/__init__.py": "", "pkg/backend.py": BACKEND_PY})
    changed = BACKEND_PY.replace('"BACKEND_NO_COMPILE", "0"', '"BACKEND_NO_COMPILE", "1"')
    sha = history.commit("no compile by default", {"pkg/backend.py": changed.replace('"backend"', '"b"')})

    gates = {row[1] for row in _rows(history, sha) if row[0] == FindingKind.ENV_GATE.value}
    assert gates == {"BACKEND_NO_COMPILE"}


def test_an_env_read_over_two_lines_in_a_long_classs_method_is_a_gate(history: History) -> None:
    history.commit("backend", {"pkg/__init__.py": "", "pkg/backend.py": BACKEND_PY})
    sha = history.commit(
        "fast by default", {"pkg/backend.py": BACKEND_PY.replace('"BACKEND_FAST", "0"', '"BACKEND_FAST", "1"')}
    )

    gates = {row[1] for row in _rows(history, sha) if row[0] == FindingKind.ENV_GATE.value}
    assert gates == {"BACKEND_FAST"}


def test_arch_targets_in_a_loop_header_and_on_a_keywords_next_line_are_table_rows(history: History) -> None:
    history.commit("backend", {"pkg/__init__.py": "", "pkg/backend.py": BACKEND_PY})
    changed = BACKEND_PY.replace('"sm_80", "sm_90"', '"sm_80", "sm_100"').replace('"sm_80;sm_90"', '"sm_80;sm_100"')
    sha = history.commit("blackwell targets", {"pkg/backend.py": changed})

    targets = {row[3:] for row in _rows(history, sha) if row[2] == "arch targets"}
    assert targets == {("sm_90; sm_90", "sm_100; sm_100")}


def test_a_settings_variable_declared_in_a_module_without_other_env_words_is_a_gate(history: History) -> None:
    settings = 'from pkg.config import EnvVar\n\nLIB_SPLIT = EnvVar("LIB_SPLIT", "0")\n'
    history.commit("settings", {"pkg/__init__.py": "", "pkg/settings.py": settings})
    sha = history.commit("split by default", {"pkg/settings.py": settings.replace('"0"', '"1"')})

    gates = {row[1] for row in _rows(history, sha) if row[0] == FindingKind.ENV_GATE.value}
    assert gates == {"LIB_SPLIT"}
