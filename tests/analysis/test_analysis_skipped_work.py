"""Work the scans leave out, and what still makes rows (real git histories): the methods a commit leaves as they
were are not scanned on either side (top_level.same_methods), but what such a method's scan reads from outside
it, the gates before it and whether its callees launch, still counts; env gates are looked for only in the
statements whose lines mention env, when the lines are the parser's lines."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, static_diff

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
    found = static_diff(history.path, sha).findings
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

    found = static_diff(history.path, sha).findings

    assert [(f.name, f.before, f.after) for f in found if f.kind is FindingKind.ENV_GATE] == [
        (
            "LIB_FAST",
            "os.environ.get('LIB_FAST', '0') == '1' (in fast)",
            "os.environ.get('LIB_FAST', '1') == '1' (in fast)",
        )
    ]
