"""C / C++ / CUDA dispatch functions, told by what their bodies do, not by their names.

    bool should_use_mmq(int cc, int64_t ne11) {    a chooser: two or more different choices returned: literals,
        if (cc == CC_VEGA) return n_experts > 0;   named constants, comparisons, the arms of a returned `c ? a : b`
        return ne11 < MAX_BATCH;                    (`return 8;`, `return KERNEL_NONE;`, `return ne11 <= 128;`);
    }                                               not 0, -1 or null alone, no status codes, no env read
    void flash_attn_ext(ctx, dst) {                 a launcher: two or more kernel sites (`k<<<...>>>` told apart
        if (cc == CC_PASCAL) flash_attn_ext_vec_f32(ctx, dst);   by the kernel, `run<...>(...)`, a GEMM library
        else flash_attn_ext_vec_f16(ctx, dst);                    call, callees that are variants of one
    }                                                             another)

A commit that changes a decision in such a function (an if, else if, a line continuing an if's condition, switch,
case, default, ?:, a bool kept, a return with a value) changes which kernel runs or how: the condition, threshold
and launch rows its lines got (native.py) are dispatch-logic rows (each keeps what it tests), and such a function
whose changed decisions got none has a dispatch-logic row of its own, named by the function. In a launcher a
decision counts when it guards a kernel site or sets what one chooses with (a launch configuration, template
arguments, a GEMM call's arguments; not a kernel's data). A decision added or removed counts as well as one changed
(a new test in a chooser is a new choice). Kernels (`__global__`, `__device__` alone) are no dispatch functions,
and a check that refuses the other case (TORCH_CHECK) is no decision.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.native_reach import LAUNCH, LAUNCH_CONFIG
from bisector.analysis.native_scope import Scope, enclosing_function, function_body
from bisector.analysis.native_value_forms import TEST_START, macro_values, value_form
from bisector.vocab.gitdiff import Hunk, line_text, unmoved

MAX_BLOCK_LINES = 120  # a decision's block is read this far for a kernel site
MAX_CONDITION_LINES = 8  # an if's condition spread over this many lines at most
MAX_STATEMENT_LINES = 12  # a kernel site's statement is read this far for the names its arguments read
STEM_JOINS = 2  # sibling callees share a stem of three or more `_`-joined words (`attn_ext_vec` of `_f32`, `_f16`)

_DECISION = re.compile(
    r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|switch)\s*(?:constexpr\s*)?\(|^\s*(?:case\b[^:]*|default\s*):|"
    r"\?[^:]*:|\bbool\s+[A-Za-z_]\w*\s*=[^=]|\breturn\b(?!\s*;)"
)
_RETURN = re.compile(r"\breturn\b\s*([^;]*);")
_STATUS = re.compile(r"success|error|invalid|status|unsupported|fail", re.I)  # status codes are no choices
_CHOICE = re.compile(  # a literal, a named constant, or a comparison (spaced, or with a number: not `a->b`, `f<T>`)
    r"^(?:true|false|-?\d[\w.]*|(?:\w+::)*[A-Z][A-Z0-9_]+)$|\s(?:[<>]=?|[=!]=)\s|(?:[<>]=?|[=!]=)\s*-?\d"
)
_ARMS = re.compile(r"[^?:]+\?\s*([^?:]+?)\s*:\s*([^?:]+)")  # the two arms of a plain `c ? a : b`
_NO_CHOICES = frozenset({"0", "-1", "nullptr", "NULL"})  # empty and error values
_CALL = re.compile(r"(?<![.>\w:])([A-Za-z_]\w*)\s*(?:<[^;()]*>\s*)?\(")
_LIBRARY_GEMM = re.compile(r"\b\w*(?:Gemm|gemm|GEMM)\w*\s*\(")
_ENV = re.compile(r"getenv", re.I)  # a chooser that reads the environment is shown by its env-gate rows
_ASSIGNED = re.compile(r"(?:^|[;{]\s*|\b(?:bool|int|auto|float|size_t|int64_t|\w+_t)\s+)([A-Za-z_]\w*)\s*=(?!=)")
_KERNEL = re.compile(r"\b__global__\b")
_HOST = re.compile(r"\b__host__\b")
_KERNEL_NAME = re.compile(r"^.*?([\w:]+)\s*(?:<[^;<>]*(?:<[^;<>]*>[^;<>]*)*>)?\s*$", re.S)  # the kernel before its <<<


def with_native_chooser_rows(
    path: str, old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk], rows: list[Finding]
) -> list[Finding]:
    """The file's rows, those named by a dispatch function whose decisions the hunks change turned dispatch-logic
    rows (each keeps what it tests and its texts), and one dispatch-logic row for such a function that has none."""
    changed: dict[str, tuple[int, str | None, str | None]] = {}
    functions = _Functions()
    was, now = macro_values(old_lines), macro_values(new_lines)
    for hunk in hunks:
        removed = list(_decisions(old_lines, hunk.old_lo, hunk.old_hi).items())
        added = list(_decisions(new_lines, hunk.new_lo, hunk.new_hi).items())
        # moved, or rewritten keeping its value (a cast, a macro for its number): the same value form on both sides
        old_forms = [value_form(old_lines[index], was) for index, _ in removed]
        new_forms = [value_form(new_lines[index], now) for index, _ in added]
        old_left, new_left = unmoved(list(range(len(removed))), list(range(len(added))), old_forms, new_forms)
        for side, lines, found, left in (("old", old_lines, removed, old_left), ("new", new_lines, added, new_left)):
            for index, head in (found[position] for position in left):
                name = functions.dispatcher(side, lines, head)
                if name:
                    line, before, after = changed.get(name, (index + 1, None, None))
                    text = line_text(lines[index])
                    changed[name] = (
                        line,
                        before or (text if side == "old" else None),
                        after or (text if side == "new" else None),
                    )
    if not changed:
        return rows
    kept = [
        replace(row, kind=FindingKind.DISPATCH_LOGIC) if row.name in changed and row.kind in _MERGED else row
        for row in rows
    ]
    named = {row.name for row in kept if row.kind is FindingKind.DISPATCH_LOGIC}
    return kept + [
        Finding(
            FindingKind.DISPATCH_LOGIC,
            path,
            name,
            key="decision of a dispatch function",
            before=before,
            after=after,
            line=line,
            detail="returns a choice or launches kernels at several sites; a decision in it changed",
        )
        for name, (line, before, after) in changed.items()
        if name not in named
    ]


_MERGED = frozenset({FindingKind.NATIVE_THRESHOLD, FindingKind.LAUNCH_PARAM, FindingKind.BRANCH_CONDITION})


@dataclass(frozen=True)
class _Dispatcher:
    name: str
    chooser: bool  # returns a choice: every decision in it counts
    body: list[str]  # its body's lines, the first one holding the opening brace
    first: int  # the index of the body's first line in the file's lines
    inputs: str  # what its kernel sites choose with (_site_inputs)
    variants: frozenset[str]  # the callees that are kernel sites by their names (_variant_callees)


class _Functions:
    """The dispatch function holding a line, remembered per side and function (a line inside a body already read
    is not walked up again)."""

    def __init__(self) -> None:
        self._spans: dict[str, list[tuple[int, int, _Dispatcher | None]]] = {"old": [], "new": []}

    def dispatcher(self, side: str, lines: list[str], index: int) -> str:
        """The name of the host function holding decision line index when it is a chooser, or a launcher and the
        decision guards a kernel site or a value one reads; else ''."""
        known = next((span for span in self._spans[side] if span[0] < index <= span[1]), None)
        if known is None:
            scope = enclosing_function(lines, index)
            if scope is None:
                return ""
            body = function_body(lines, scope.line)
            host = not _KERNEL.search(scope.opening) and (not scope.device or _HOST.search(scope.opening))
            known = (scope.line, scope.line + len(body) - 1, _classified(body, scope) if host else None)
            self._spans[side].append(known)
        found = known[2]
        if found is None or not (found.chooser or _guards(found, index - found.first)):
            return ""
        return found.name


def _classified(body: list[str], scope: Scope) -> _Dispatcher | None:
    if _chooses(body) and not any(_ENV.search(text) for text in body):
        return _Dispatcher(scope.function, True, body, scope.line, "", frozenset())
    variants = _variant_callees(body)
    inputs = _site_inputs(body, variants)
    return None if inputs is None else _Dispatcher(scope.function, False, body, scope.line, inputs, variants)


def _guards(found: _Dispatcher, at: int) -> bool:
    """The decision at body line at holds or governs a kernel site, or sets a name a site reads."""
    text = " ".join(_governed(found.body, at))
    if _site_matches(text, found.variants):
        return True
    return any(re.search(rf"\b{re.escape(name)}\b", found.inputs) for name in _ASSIGNED.findall(text))


def _governed(body: list[str], at: int) -> list[str]:
    """The decision line with what it governs: an if's or switch's block, or a statement to its semicolon."""
    block, depth, opened = [], 0, False
    for text in body[at : at + MAX_BLOCK_LINES]:
        block.append(text)
        depth += text.count("{") - text.count("}")
        opened = opened or "{" in text
        if (opened and depth <= 0) or (not opened and text.rstrip().endswith(";")):
            break
    return block


def _site_inputs(body: list[str], variants: frozenset[str]) -> str | None:
    """What the kernel sites choose with: launch configurations (`<<<grid, block>>>`), template arguments of
    instantiations, and whole GEMM library calls (their compute type and algorithm are arguments; a statement to its
    semicolon, a few lines at most); None when there are fewer than two sites (launches, instantiations, GEMM
    library calls, variant callees). A kernel's data arguments are no choice."""
    sites = set(variants)
    inputs: list[str] = []
    for at, text in enumerate(body):
        if "(" not in text and "<" not in text:
            continue  # no call, launch or instantiation starts on the line
        launches = [_KERNEL_NAME.sub(r"\1", text[: match.start()]) if match[0] == "<<<" else match[0]
                    for match in LAUNCH.finditer(text)]  # fmt: skip
        sites.update(launches)
        inputs.extend(launches + LAUNCH_CONFIG.findall(text))
        if ("emm" in text or "EMM" in text) and _LIBRARY_GEMM.search(text):
            sites.update(match[0] for match in _LIBRARY_GEMM.finditer(text))
            statement = [text]
            for more in body[at + 1 : at + MAX_STATEMENT_LINES]:
                if statement[-1].rstrip().endswith(";"):
                    break
                statement.append(more)
            inputs.append(" ".join(statement))
    return "\n".join(inputs) if len(sites) >= 2 else None


def _site_matches(text: str, variants: frozenset[str]) -> bool:
    if LAUNCH.search(text) or _LIBRARY_GEMM.search(text):
        return True
    return any(callee in variants for callee in _CALL.findall(text))


def _decisions(lines: list[str], lo: int, hi: int) -> dict[int, int]:
    """The decision lines among lines lo..hi, each with the line that opens its decision: itself, or for a line
    that continues an if's condition (`    || ratio == 10)) {`), the if a few lines above."""
    found: dict[int, int] = {}
    for index in range(lo, min(hi, len(lines))):
        if _DECISION.search(lines[index]):
            found[index] = index
        elif (head := _condition_head(lines, index)) is not None:
            found[index] = head
    return found


def _condition_head(lines: list[str], index: int) -> int | None:
    depth = 0
    for earlier in range(index - 1, max(index - MAX_CONDITION_LINES, -1), -1):
        text = lines[earlier]
        if text.rstrip().endswith((";", "{", "}")) or text.lstrip().startswith("#"):
            return None
        depth += text.count("(") - text.count(")")
        if TEST_START.match(text):
            return earlier if depth > 0 else None
    return None


def _chooses(body: list[str]) -> bool:
    """Two or more different choices returned (literals, named constants, comparisons; not 0, -1 or null
    alone; the arms of `return ldmc ? 8.44e9 : 26.6e9;` each count), and no status code."""
    values: set[str] = set()
    for text in body:
        for match in _RETURN.finditer(text):
            value = " ".join(match[1].split())
            arms = _ARMS.fullmatch(value)
            values.update(arms.group(1, 2) if arms else (value,) if value else ())
    choices = {value for value in values if _CHOICE.search(value) and value not in _NO_CHOICES}
    return len(choices) >= 2 and not any(_STATUS.search(value) for value in values)


def _variant_callees(body: list[str]) -> frozenset[str]:
    """Callees that are variants of one another (siblings sharing a stem of three or more `_`-joined words:
    `attn_ext_vec_f32`, `attn_ext_vec_f16`); not macros (`LOG_INFO`, `LOG_WARN`)."""
    callees = {callee for text in body for callee in _CALL.findall(text) if not callee.isupper()}
    stems = Counter(_stem(callee) for callee in callees)
    return frozenset(
        callee for callee in callees if stems[_stem(callee)] >= 2 and _stem(callee).count("_") >= STEM_JOINS
    )


def _stem(callee: str) -> str:
    return callee.rsplit("_", 1)[0]
