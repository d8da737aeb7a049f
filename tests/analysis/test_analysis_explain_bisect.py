"""explain_bisect end to end: a real bisect of a pure-Python repository, its traced re-runs wrapping the function
the static diff names, and the stored report; and a culprit with nothing to trace, whose re-runs are skipped."""

from __future__ import annotations

import sys

from analysis_history import History
from bisect_helpers import synthetic_spec

from bisector.db.store import Store
from bisector.explain import stored_explanation
from bisector.runner.coordinator import Coordinator
from bisector.runner.wiring import make_executor
from bisector.vocab.domain import BisectStatus, StepPurpose

DISPATCH = """\
    MMA_MIN_M = 16


    def pick_kernel(n, k, m):
        if m >= MMA_MIN_M:
            return "mma"
        return "simt"
"""
CHECK = """\
    import sys

    sys.path.insert(0, "src")
    from mylib.dispatch import pick_kernel

    kernels = [pick_kernel(4096, 7168, m) for m in (1, 4, 16)]
    sys.exit(0 if kernels[1] == "simt" else 1)  # m=4 must stay on the SIMT kernel
"""


def _start(store: Store, history: History, good: str, bad: str) -> int:
    spec = synthetic_spec(history.path, good, bad, run=f"{sys.executable} check.py", build=None, explain=True)
    record = Coordinator(store, make_executor, poll_interval_s=0.05).start(spec)
    assert record.status is BisectStatus.FOUND
    return record.id


def test_the_traced_reruns_record_what_the_named_function_returned_per_call(history: History, store: Store) -> None:
    files = {"src/mylib/__init__.py": "", "src/mylib/dispatch.py": DISPATCH, "check.py": CHECK, "README.md": "a\n"}
    good = history.commit("dispatch", files)
    history.commit("docs", {"README.md": "b\n"})
    bad = history.commit("MMA earlier", {"src/mylib/dispatch.py": DISPATCH.replace("m >= MMA_MIN_M", "m >= 2")})

    bisect_id = _start(store, history, good, bad)

    explanation = stored_explanation(store, bisect_id)
    assert explanation is not None
    assert explanation.trace_note == (
        "run at last good and first bad, tracing the 1 functions the static diff names "
        "(src/mylib/dispatch.py:pick_kernel)"
    )
    assert explanation.calls is not None
    assert [(r.function, r.args, r.before, r.after) for r in explanation.calls.rows] == [
        ("mylib.dispatch:pick_kernel", "4096, 7168, 4", "'simt'", "'mma'")
    ]
    assert explanation.calls.unchanged == 2  # m=1 and m=16
    # no dispatch trace here: the traced function is the evidence that confirms the static row naming it
    assert [(row.finding.name, row.evidence.value) for row in explanation.checked] == [("pick_kernel", "runtime")]
    traced = [s for s in store.steps(bisect_id) if s.purpose is StepPurpose.TRACE]
    assert len(traced) == 2


def test_reruns_are_skipped_and_the_report_says_how_to_ask_when_nothing_can_be_traced(
    history: History, store: Store
) -> None:
    good = history.commit("start", {"check.sh": 'test "$(cat verdict)" = good\n', "verdict": "good\n"})
    bad = history.commit("flip", {"verdict": "bad\n"})
    spec = synthetic_spec(history.path, good, bad, run="sh check.sh", build=None, explain=True)

    record = Coordinator(store, make_executor, poll_interval_s=0.05).start(spec)

    explanation = stored_explanation(store, record.id)
    assert explanation is not None
    assert explanation.trace_note is not None
    assert explanation.trace_note.startswith("skipped: the static diff names no function to trace")
    assert "`bisect start` --trace-kernels" in explanation.trace_note
    assert not [s for s in store.steps(record.id) if s.purpose is StepPurpose.TRACE]


def test_traced_reruns_that_contradict_the_search_warn_that_the_culprit_may_be_a_flake(
    history: History, store: Store
) -> None:
    """A good commit whose first run ever fails (a one-sided flake) is named by a one-run-per-commit search; its
    traced re-run passes, and the stored explanation says the culprit may be wrong and how to bisect again."""
    marker = history.path.parent / "flaked-once"
    flaky_check = CHECK.replace(
        "kernels = [",
        f"import pathlib\n    if pathlib.Path('flaky').exists() and not pathlib.Path({str(marker)!r}).exists():\n"
        f"        pathlib.Path({str(marker)!r}).touch()\n        sys.exit(1)\n    kernels = [",
    )
    files = {"src/mylib/__init__.py": "", "src/mylib/dispatch.py": DISPATCH, "check.py": flaky_check}
    good = history.commit("dispatch", files)
    history.commit(
        "tidy", {"flaky": "", "src/mylib/dispatch.py": DISPATCH.replace("m >= MMA_MIN_M", "m > MMA_MIN_M - 1")}
    )
    bad = history.commit("MMA earlier", {"src/mylib/dispatch.py": DISPATCH.replace("m >= MMA_MIN_M", "m >= 2")})

    spec = synthetic_spec(history.path, good, bad, run=f"{sys.executable} check.py", build=None, explain=True)
    record = Coordinator(store, make_executor, poll_interval_s=0.05).start(spec)

    assert record.status is BisectStatus.FOUND, record.message
    assert record.first_bad != bad  # the flake misled the search
    explanation = stored_explanation(store, record.id)
    assert explanation is not None
    assert explanation.trace_note is not None
    assert "warning: the re-runs contradict the search (good at last good, good at first bad)" in explanation.trace_note
    assert "--strategy noisy" in explanation.trace_note


def test_contradicted_reads_the_boundary_both_ways():
    from bisector.core.spec import BisectSpec
    from bisector.explain import contradicted
    from bisector.vocab.domain import Verdict

    regression, fix = (
        BisectSpec.from_options({"repo": "/r", "good": "a", "bad": "b", "run": "true", "find_fix": find_fix})
        for find_fix in (False, True)
    )
    assert not contradicted(Verdict.GOOD, Verdict.BAD, regression)
    assert contradicted(Verdict.GOOD, Verdict.GOOD, regression)
    assert contradicted(Verdict.BAD, Verdict.BAD, regression)
    assert not contradicted(Verdict.ERROR, Verdict.SKIP, regression)  # says nothing either way
    assert not contradicted(Verdict.BAD, Verdict.GOOD, fix)
    assert contradicted(Verdict.GOOD, Verdict.GOOD, fix)
