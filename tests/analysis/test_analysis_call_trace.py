"""Traced re-runs for any Python stack: the functions the static diff names are wrapped by the sitecustomize hook
in real subprocesses, and the report shows per call what they returned at last good and first bad."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from analysis_history import History

from bisector.analysis import Explanation, TraceFiles, explain, render_markdown, render_text, runtime_diffs
from bisector.analysis.call_trace import read_call_trace, traced_functions
from bisector.analysis.findings import FindingKind

DISPATCH = """\
    MMA_MIN_M = 16


    def pick_kernel(n, k, m):
        if m >= MMA_MIN_M:
            return "mma"
        return "simt"


    class Planner:
        @staticmethod
        def tile(m):
            return 64 if m > 32 else 16

        def plan(self, shape):
            return {"kernel": pick_kernel(*shape), "tile": self.tile(shape[2])}
"""
APP = """\
    import sys

    from mylib.dispatch import Planner, pick_kernel

    for m in (1, 4, 16):
        pick_kernel(4096, 7168, m)
    Planner().plan((144, 7168, int(sys.argv[1])))
"""


def _run_traced(history: History, sha: str, files: TraceFiles, tmp_path: Path) -> None:
    """Check sha out into its own directory and run the app in a fresh interpreter, as a traced step would."""
    work = tmp_path / sha[:12]
    history.git("worktree", "add", "-q", "--detach", str(work), sha)
    env = {**os.environ, "PYTHONPATH": str(work / "src")}
    env.update(files.env(env))
    subprocess.run([sys.executable, "app.py", "5"], cwd=work, env=env, check=True, capture_output=True, text=True)


def _histories(history: History) -> tuple[str, str]:
    good = history.commit("dispatch", {"src/mylib/__init__.py": "", "src/mylib/dispatch.py": DISPATCH, "app.py": APP})
    bad = history.commit("MMA earlier", {"src/mylib/dispatch.py": DISPATCH.replace("m >= MMA_MIN_M", "m >= 2")})
    return good, bad


def test_the_named_functions_are_traced_in_subprocesses_and_diffed_per_call(history: History, tmp_path: Path) -> None:
    good, bad = _histories(history)
    static = explain(history.path, bad, good)
    functions = traced_functions(static)
    assert functions == ["src/mylib/dispatch.py:pick_kernel"]
    targets = [*functions, "src/mylib/dispatch.py:Planner.tile", "src/mylib/dispatch.py:Planner.plan"]
    traces = tmp_path / "traces"
    good_files = TraceFiles.under(traces, "last-good", trace_kernels=False, functions=targets)
    bad_files = TraceFiles.under(traces, "first-bad", trace_kernels=False, functions=targets)
    for files in (good_files, bad_files):
        files.reset()

    _run_traced(history, good, good_files, tmp_path)
    _run_traced(history, bad, bad_files, tmp_path)

    assert good_files.calls is not None
    recorded = {(c.function, c.args): c.result for c in read_call_trace(good_files.calls)}
    assert recorded[("mylib.dispatch:Planner.tile", "5")] == "16"  # a staticmethod, no self to drop
    assert recorded[("mylib.dispatch:Planner.plan", "(144, 7168, 5)")] == "{'kernel': 'simt', 'tile': 16}"
    calls = runtime_diffs(good_files, bad_files).calls
    assert calls is not None
    assert {(r.function, r.args): (r.before, r.after) for r in calls.rows} == {
        ("mylib.dispatch:pick_kernel", "4096, 7168, 4"): ("'simt'", "'mma'"),
        ("mylib.dispatch:pick_kernel", "144, 7168, 5"): ("'simt'", "'mma'"),
        ("mylib.dispatch:Planner.plan", "(144, 7168, 5)"): (
            "{'kernel': 'simt', 'tile': 16}",
            "{'kernel': 'mma', 'tile': 16}",
        ),
    }
    assert calls.unchanged == 3  # m=1 and m=16 of pick_kernel, and tile(5)

    explanation = Explanation(static=static, calls=calls, trace_note="run at last good and first bad")
    text = render_text(explanation, width=200)
    assert "traced functions: result per call (last good -> first bad)" in text
    assert "| mylib.dispatch:pick_kernel | 4096, 7168, 4 | 'simt' | 'mma' |" in render_markdown(explanation)
    again = Explanation.from_findings(explanation.findings())
    assert again.calls == calls
    assert again.trace_note == "run at last good and first bad"


def test_a_program_that_imports_nothing_traced_runs_unchanged_and_leaves_no_trace(
    history: History, tmp_path: Path
) -> None:
    good, _ = _histories(history)
    files = TraceFiles.under(tmp_path / "traces", "last-good", trace_kernels=False, functions=["other/mod.py:f"])
    files.reset()
    _run_traced(history, good, files, tmp_path)

    assert files.calls is not None
    assert not files.calls.exists()


def test_only_changed_functions_outside_tests_that_exist_after_the_commit_are_named(history: History) -> None:
    history.commit("dispatch", {"src/mylib/dispatch.py": DISPATCH})
    after = DISPATCH.replace("if m >= MMA_MIN_M:", "if m >= MMA_MIN_M or n > 8192:")
    sha = history.commit(
        "gate",
        {"src/mylib/dispatch.py": after, "tests/test_dispatch.py": "def test_x(m):\n    if m > 4:\n        pass\n"},
    )

    static = explain(history.path, sha)

    assert traced_functions(static) == ["src/mylib/dispatch.py:pick_kernel"]
    assert any(f.kind is FindingKind.BRANCH_CONDITION for f in static.findings)


def test_traced_reruns_are_planned_only_where_they_can_add_something(history: History) -> None:
    from bisect_helpers import synthetic_spec

    from bisector.explain import plan_traced_reruns

    good = history.commit("docs", {"README.md": "hello\n", "src/mylib/dispatch.py": DISPATCH})
    docs_only = history.commit("docs", {"README.md": "hello again\n"})
    spec = synthetic_spec(history.path, good, docs_only)

    skipped = plan_traced_reruns(explain(history.path, docs_only), spec, str(history.path), docs_only)
    assert not skipped.run
    assert skipped.note.startswith("skipped: the static diff names no function to trace")
    assert "give `bisect start` --trace-kernels (or trace_kernels = true in bisect.toml)" in skipped.note

    asked = plan_traced_reruns(None, synthetic_spec(history.path, good, docs_only, trace_kernels=True), ".", docs_only)
    assert asked.run
    assert asked.note == "run at last good and first bad, tracing kernel launches (--trace-kernels)"

    gate = history.commit("gate", {"src/mylib/dispatch.py": DISPATCH.replace("m >= MMA_MIN_M", "m >= 2")})
    named = plan_traced_reruns(explain(history.path, gate), spec, str(history.path), gate)
    assert (named.run, named.functions, named.dispatch_trace) == (True, ("src/mylib/dispatch.py:pick_kernel",), False)

    tracing = history.commit("trace", {"src/mylib/trace.py": 'TRACE = os.environ.get("KERNELS_DISPATCH_TRACE")\n'})
    stack = plan_traced_reruns(explain(history.path, docs_only), spec, str(history.path), tracing)
    assert (stack.run, stack.dispatch_trace) == (True, True)
    assert stack.note == "run at last good and first bad, tracing the stack's dispatch trace"
