"""The row of last resort: in a changed source file that no other rule gave a row, each host function whose branch
tests the commit changes is a branch_condition row (the first test it removes and the first it adds); each whose
assignments to a launch's work size change (`lws[0] = std::max<uint32_t>(...)` in OpenCL code) a launch_param row;
each Python function whose tests stay but whose parameter defaults change (`scaling_type_x=TensorScalingType.DELAYED`
-> `DYNAMIC`: every caller that passes none gets the other path) a constant row.

The other rules read the forms of dispatch seen in the projects they were written from (batch-size thresholds,
arch / dtype / env tests, launch arguments, tables). On projects read for the first time most of the changes they
missed were a branch test of a host function that picks a kernel, an algorithm or a path: a `case` moved from one
algorithm to another, an `if` that re-routes an op, a new guard before a library call. A changed test is:
- C / C++ / CUDA: a line of an `if`, `while` or `switch` head, a `case` or `default` label, a `?:` or a `#if` /
  `#elif` / `#ifdef` / `#ifndef`, removed or added by a hunk that does not add or remove the same text again;
- Python: the test of an `if`, `elif`, `while` or conditional expression of a function or method on both sides,
  counted as a multiset (a test moved inside the function is no change).
Kernel code (a __global__ / __device__ function, a @triton.jit / autotune / heuristics kernel) computes rather than
chooses, guards a commit only adds (against None, nullptr, an empty input, a zero count, a negative index) stop
before any choice, a function named for housekeeping (freeing, allocating, logging, an error string) chooses no
kernel, and files of examples, experiments, benchmarks and ROCm's test clients run no library dispatch: none gives
rows. A commit that changes the branches of more than MAX_FUNCTIONS host functions this way is a refactor or a
feature more than a dispatch change: those functions are named in one note instead of rows.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bisector.analysis.changed_statements import changed_functions
from bisector.analysis.code_shape import FunctionNode, ParsedSource, decorated_as_kernel, own_nodes, parameter_defaults
from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.native_launch_locals import WORK_SIZE_NAME
from bisector.analysis.native_scope import enclosing_function
from bisector.analysis.native_value_forms import tested_again
from bisector.vocab.gitdiff import Hunk

MAX_FUNCTIONS = 2  # host functions a commit's rows of last resort may name; more: one note
ROW_KEY = "branch test"
SHAPE_KEY = "launch shape"
DEFAULT_KEY = "parameter default"
LAST_RESORT_KEYS = frozenset({ROW_KEY, SHAPE_KEY, DEFAULT_KEY})  # the keys of every row this module gives
_DETAIL = "a branch test of this function changed ({count} in all); no more specific rule read it"
_SHAPE_DETAIL = "a work-size assignment of this function changed ({count} lines); no more specific rule read it"
_DEFAULT_DETAIL = "a parameter default of this function changed ({count} in all); no more specific rule read it"
_KEY_AND_DETAIL = {  # by the kind of a row of last resort
    FindingKind.BRANCH_CONDITION: (ROW_KEY, _DETAIL),
    FindingKind.LAUNCH_PARAM: (SHAPE_KEY, _SHAPE_DETAIL),
    FindingKind.CONSTANT: (DEFAULT_KEY, _DEFAULT_DETAIL),
}

_NATIVE_TEST = re.compile(
    r"\b(?:if|while|switch)\s*(?:constexpr\s*)?\(|^\s*(?:case\b[^:]*|default\s*):|\?[^:;]*:"
    r"|^\s*#\s*(?:if|elif|ifdef|ifndef)\b"
)
# an assignment to a work size, whole or one dimension: `lws[1] = std::min<uint32_t>(gws[1], kwg_size);`
_NATIVE_SHAPE = re.compile(rf"\b{WORK_SIZE_NAME}\s*(?:\[[^\]]*\]\s*)?(?:[-+*/]?=)(?!=)|\b{WORK_SIZE_NAME}\s*\{{", re.I)
_GUARD = re.compile(
    r"(?:==|!=)\s*(?:nullptr|NULL|None)\b|\bis\s+(?:not\s+)?None\b|\.empty\(\)|\b(?:size|numel|length)\(\)\s*==\s*0\b"
    r"|[\w\])]\s*==\s*0\s*\)|<\s*0\b"
)
_EXIT = re.compile(r"\b(?:return|throw|break|continue)\b|\b[A-Z][A-Z0-9_]*(?:THROW|ERROR|FAIL|ABORT)\w*\s*\(")
# words of a function's name that say it frees, allocates, logs or describes rather than chooses (deleteAxis,
# getVkFFTErrorString, ArmDevice::Allocate, logSubsysToString)
_HOUSEKEEPING_WORDS = frozenset(
    {"alloc", "allocate", "cleanup", "del", "delete", "deleter", "destroy", "dump", "error", "errors", "free", "log",
     "logger", "print", "release", "repr", "str", "string", "tostring"}
)  # fmt: skip
_NAME_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


@dataclass(frozen=True)
class _TestLine:
    removed: bool  # a line of the old side, else of the new
    text: str
    line: int  # 1-based, on its side
    shape: bool = False  # an assignment to a launch's work size, not a branch test
    exits: bool = False  # the test's branch returns or throws at once


@dataclass(frozen=True)
class BranchChange:
    """The changed branch tests of one host function of one file."""

    file: str
    function: str
    before: str | None  # the first test removed
    after: str | None  # the first test added
    line: int | None  # 1-based, after the commit where it adds a test
    count: int  # tests removed and added
    kind: FindingKind = FindingKind.BRANCH_CONDITION  # LAUNCH_PARAM: work-size lines; CONSTANT: parameter defaults

    def row(self) -> Finding:
        key, detail = _KEY_AND_DETAIL[self.kind]
        return Finding(
            self.kind, self.file, self.function, key=key,
            before=self.before and short_text(self.before), after=self.after and short_text(self.after),
            line=self.line, detail=detail.format(count=self.count),
        )  # fmt: skip


def last_resort_rows(changes: Sequence[BranchChange]) -> list[Finding]:
    """One row per changed function, or one note naming them all when there are more than MAX_FUNCTIONS."""
    if len(changes) <= MAX_FUNCTIONS:
        return [change.row() for change in changes]
    named = ", ".join(f"{change.file}: {change.function}" for change in changes[:10])
    more = f" and {len(changes) - 10} more" if len(changes) > 10 else ""
    detail = f"no more specific rule read them; too many to be a dispatch change alone: {named}{more}"
    name = f"branch tests changed in {len(changes)} functions"
    return [Finding(FindingKind.NOTE, changes[0].file, name, detail=detail)]


def housekeeping(function: str) -> bool:
    """A function whose name says it frees, allocates, logs or describes (an error, a string)."""
    last = re.split(r"::|\.", function)[-1]
    return any(word.lower() in _HOUSEKEEPING_WORDS for word in _NAME_WORD.findall(last))


def native_branch_changes(
    path: str, old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk]
) -> list[BranchChange]:
    """The host functions whose branch test lines, or else work-size assignments (comment-stripped), the hunks remove
    or add, in file order."""
    found: dict[str, list[_TestLine]] = {}
    for pattern in (_NATIVE_TEST, _NATIVE_SHAPE):
        shape = pattern is _NATIVE_SHAPE
        for hunk in hunks:
            removed = _tests(old_lines, hunk.old_lo, hunk.old_hi, pattern)
            added = _tests(new_lines, hunk.new_lo, hunk.new_hi, pattern)
            old_hunk, new_hunk = old_lines[hunk.old_lo : hunk.old_hi], new_lines[hunk.new_lo : hunk.new_hi]
            for lines, mine, theirs, other_hunk, gone in (
                (old_lines, removed, added, new_hunk, True), (new_lines, added, removed, old_hunk, False)
            ):  # fmt: skip
                for index, text in mine.items():
                    if not _changed(lines[index], text, theirs, other_hunk):
                        continue
                    function = _host_function(lines, index)
                    if function and not (shape and _tests_of(found.get(function, []))):
                        test = _TestLine(gone, lines[index], index + 1, shape, _exits_at_once(lines, index))
                        found.setdefault(function, []).append(test)
    return [_change(path, function, tests) for function, tests in found.items() if not _guards_only(tests)]


def _guards_only(tests: list[_TestLine]) -> bool:
    """Every changed line is a guard the commit adds (no test removed, no work size)."""
    return all(not test.removed and not test.shape and test.exits and guard(test.text) for test in tests)


def guard(test: str) -> bool:
    """A test against a missing, empty or out-of-range input (None, nullptr, empty(), a count of 0, an index below
    0); with a branch that returns or raises at once (or fills the input in), a guard, not a choice of kernel or
    path."""
    return _GUARD.search(test) is not None


def _exits_at_once(lines: list[str], index: int) -> bool:
    """The branch of the test on line index returns, throws, breaks or continues on that line or the next two."""
    return any(_EXIT.search(line) for line in lines[index : index + 3])


def _tests_of(lines: list[_TestLine]) -> bool:
    return any(not line.shape for line in lines)


def python_branch_changes(path: str, before: ParsedSource, after: ParsedSource) -> list[BranchChange]:
    """The functions and methods on both sides (not kernels) whose multiset of branch tests differs, or else whose
    parameters' defaults differ."""
    changes = []
    for name, old, new in changed_functions(before, after, _not_choosing):
        was, now = _python_tests(old), _python_tests(new)
        gone = Counter(text for _, text in was) - Counter(text for _, text in now)
        came = Counter(text for _, text in now) - Counter(text for _, text in was)
        if not gone and came and all(guard(text) for text in came) and came.keys() <= _exiting_tests(new):
            continue  # guards added, nothing re-routed
        if gone or came:
            first_gone = next((text for _, text in was if text in gone), None)
            first_came, line = next(((text, line) for line, text in now if text in came), (None, None))
            changes.append(BranchChange(path, name, first_gone, first_came, line, gone.total() + came.total()))
        elif defaults := _changed_defaults(old, new):
            (parameter, old_default, new_default), *_ = defaults
            changes.append(
                BranchChange(
                    path, name, f"{parameter}={old_default}", f"{parameter}={new_default}", new.lineno, len(defaults),
                    FindingKind.CONSTANT,
                )
            )  # fmt: skip
    return changes


def _changed_defaults(old: FunctionNode, new: FunctionNode) -> list[tuple[str, str, str]]:
    """(parameter, old default, new default) of the parameters with a default on both sides that differs."""
    was, now = ({name: ast.unparse(default) for name, default in parameter_defaults(f)} for f in (old, new))
    return [(name, was[name], default) for name, default in now.items() if name in was and was[name] != default]


def _not_choosing(name: str, function: FunctionNode) -> bool:
    return decorated_as_kernel(function) or housekeeping(name)


def _tests(lines: list[str], low: int, high: int, pattern: re.Pattern[str]) -> dict[int, str]:
    """The lines among lines[low:high] that pattern finds (branch tests, work-size assignments), by index, as text
    without whitespace."""
    return {i: "".join(lines[i].split()) for i in range(low, min(high, len(lines))) if pattern.search(lines[i])}


def _changed(line: str, text: str, other_tests: dict[int, str], other_side: list[str]) -> bool:
    """A test the hunk's other side neither keeps (moved lines) nor writes in another form (native_value_forms.py:
    `if constexpr (c)` -> `AF_IF_CONSTEXPR(c)`)."""
    return text not in other_tests.values() and not tested_again(line, other_side)


def _host_function(lines: list[str], index: int) -> str | None:
    """The function holding line index, unless it is kernel code or housekeeping."""
    scope = enclosing_function(lines, index)
    if scope is None or scope.device or housekeeping(scope.function):
        return None
    return scope.function


def _change(path: str, function: str, tests: list[_TestLine]) -> BranchChange:
    """The function's row: its first test removed and first added; a test only moved elsewhere in the function (a
    `case` label to another group) shows the lines it moved between."""
    gone = next((test for test in tests if test.removed), None)
    came = next((test for test in tests if not test.removed), None)
    before = gone.text.strip() if gone else None
    after = came.text.strip() if came else None
    if gone and came and before == after:
        before, after = f"{before} (line {gone.line} before)", f"{after} (line {came.line})"
    kind = FindingKind.BRANCH_CONDITION if _tests_of(tests) else FindingKind.LAUNCH_PARAM
    return BranchChange(path, function, before, after, came.line if came else None, len(tests), kind)


def _exiting_tests(function: FunctionNode) -> set[str]:
    """The tests of the function's own `if`s whose body starts by returning, raising, breaking or continuing, or by
    filling in the name it tested (`if device is None: device = ...`)."""
    return {ast.unparse(node.test) for node in own_nodes(function) if isinstance(node, ast.If) and _guarding(node)}


def _guarding(node: ast.If) -> bool:
    first = node.body[0]
    if isinstance(first, ast.Return | ast.Raise | ast.Break | ast.Continue):
        return True
    tested = {ast.unparse(name) for name in ast.walk(node.test) if isinstance(name, ast.Name | ast.Attribute)}
    targets = first.targets if isinstance(first, ast.Assign) else []
    return any(ast.unparse(target) in tested for target in targets)


def _python_tests(function: FunctionNode) -> list[tuple[int, str]]:
    """The function's own branch tests as (line, source text), in source order."""
    tests = []
    for node in own_nodes(function):
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            tests.append((node.test.lineno, ast.unparse(node.test)))
    return sorted(tests)
