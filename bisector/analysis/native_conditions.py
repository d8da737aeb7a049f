"""More C / C++ / CUDA condition lines (native.py's `_condition` asks here after its own labels): the arch named in a
line that continues a boolean expression (`(dprops->major == 10 && dprops->minor == 0) ||`), in a bool or a `?:` (`bool
is_sm8x = cc_major == 8 && cc_minor > 0;`, `TargetIsVolta(target) ? 16 : 8`), and a threshold: a size compared with a
number (other than 0 or 1: those test for empty, null or errors) or a threshold's name (`MAX_BATCH`,
`AR_SIZE_THRESHOLD`) in an `if` / `while` / `?:` of a host function (a kernel's own branches are its body), a row when
the commit changes it (a new test alone is new code). The arch also chooses without a branch: a type picked by
std::conditional (`using network_precision_t = std::conditional_t<MIN_GPU_ARCH == 61, float, __half>;`) and a value
clamped (`cc = min(cc, 90u);`). row_name names native.py's condition rows by the function they are in, or at file scope
by what the condition declares (the alias, or the first constant or macro of its #if block: `#if MPK_TARGET_CC >= 90` /
`constexpr int MAX_SHARE_MEMORY_SIZE = ...` is a MAX_SHARE_MEMORY_SIZE row); a test in a function the commit adds or
removes whole is new or dropped code, no row. Also no rows: a file-scope #if block that only refuses to build
(`#error`), an arch or threshold test rewritten with the same numbers, comparisons, logic and constants (`gcnArch ==
908` -> `gcnArchName.find("908") != npos`), an #if whose branches differ only by names spelled longer (`double4` /
`double4_32a`), an arch #if added or removed around device or file-scope code whose #else only warns or traps (`#warning
"only on Ampere"`: a compile guard). An if's condition spread over lines is read whole, and a host function's branch
that compares with other upper-case named values than before (`path->type == PATH_NVL` -> `... || path->type ==
PATH_NVB`; status codes aside) is a 'condition on a named value' row. A flag kept in a bool (`bool fast = N % bn == 0
&& K % 512 == 0;`) is a row when both versions have it; a test of the platform (HIP / CUDA) is one inside a host
function whose branches make different calls; a line that continues an `#if` is named by that `#if`'s block.
A threshold is also a host function's returned test (`return seqlen <= 1024 && seqlen > 128;`: a predicate), and an
arch `#if` that became an `#elif` (a new test now comes first) is no rewrite."""

from __future__ import annotations

import re

from bisector.analysis.native_directives import (
    MAX_GUARD_LINES,
    PP_ELSE,
    PP_END,
    PP_OPEN,
    directive_end,
    directive_start,
)
from bisector.analysis.native_dispatch import with_open_parentheses
from bisector.analysis.native_scope import defined_in, enclosing_function

ARCH_LABEL = "condition on the arch"
THRESHOLD_LABEL = "threshold"
BATCH_LABEL = "condition on the batch size"
PLATFORM_LABEL = "condition on the platform"  # HIP / ROCm or CUDA
NAMED_LABEL = "condition on a named value"  # path->type == PATH_NVL: an enumerated kind of link, algorithm, ...
FLAG_LABEL = "condition kept in a bool"  # bool fast = N % bn == 0 && K % 512 == 0;
MACRO_LABEL = "condition on a macro"  # #if USE_STAGGERED_INDICES == 1 && GEMMK == 0
SWITCHED_OFF_LABEL = "code switched off"  # `#if 0` added around file-scope code (or removed: switched on again)

_ARCH = re.compile(
    r"\b\w*(?:major|minor)\s*[<>=!]=\s*\d|\b\w*(?:major|minor)\s*[<>]\s*\d|"
    r"\b\w*(?:Volta|Turing|Ampere|Hopper|Blackwell|Pascal|Maxwell|Kepler)\w*\b"
)
_RETURNED_TEST = re.compile(r"^\s*return\b[^;?]*(?:[<>]=?|[=!]=)[^;?]*;")
_CONTINUES = re.compile(r"^\s*(?:&&|\|\||and\b|or\b)|(?:&&|\|\|)\s*$")
_CHOICE = re.compile(r"\bbool\s+[A-Za-z_]\w*\s*=[^=]|\?[^:]*:")
_BRANCH = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|while)\s*(?:constexpr\s*)?\(|\?[^:]*:")
_NUMBER_TEST = re.compile(
    r"(?:[<>]=?|[=!]=)\s*\(?\s*(?P<right>-?\d[\w.]*)|(?P<left>(?<![\w.])-?\d[\w.]*)\s*\)?\s*(?:[<>]=?|[=!]=)(?!=)"
)
_NAMED_THRESHOLD = re.compile(
    r"(?:[<>]=?)\s*\(?\s*(?:[A-Z][A-Z0-9_]*_(?:THRESHOLD|LIMIT|MAX|MIN)|(?:MAX|MIN)_[A-Z0-9_]+)\b|"
    r"\b(?:[A-Z][A-Z0-9_]*_(?:THRESHOLD|LIMIT|MAX|MIN)|(?:MAX|MIN)_[A-Z0-9_]+)\s*\)?\s*[<>]=?(?![<>])"
)
# a flag a host function computes from a comparison, on one line: `bool fast = N % bn == 0 && K % 512 == 0;`
_FLAG = re.compile(r"^\s*(?:const\s+)?bool\s+[A-Za-z_]\w*\s*=[^=;][^;]*(?:[<>]=?|[=!]=)[^;]*;\s*$")
_TYPE_CHOICE = re.compile(r"\bconditional(?:_t)?\s*<")  # std::conditional_t<MIN_GPU_ARCH < 70, float, __half>
_CLAMP = re.compile(r"^\s*[A-Za-z_][\w.>-]*\s*=\s*(?:std::)?(?:min|max)\s*\(")  # cc = min(cc, 90u);
_USING = re.compile(r"\busing\s+(?P<name>[A-Za-z_]\w*)\s*=")
_DECLARED = re.compile(
    r"^\s*#\s*define\s+(?P<macro>[A-Za-z_]\w*)|\busing\s+(?P<alias>[A-Za-z_]\w*)\s*=|"
    r"\b(?:constexpr|const)\b[^;=(){}]*?\b(?P<constant>[A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*="
)
_PP_SPLIT = re.compile(r"^\s*#\s*(?:elif|else|endif)\b")
_INCLUDE = re.compile(r"^\s*#\s*include\b")
_REFUSAL = re.compile(r"^\s*#\s*error\b")
INCLUDES_ONLY = "#include"  # a file-scope #if block that opens with an #include: what it includes is used elsewhere
MAX_ALIAS_LINES = 12  # how far above a line of a std::conditional its `using X =` is looked for
MAX_BLOCK_LINES = 40  # how far into a file-scope #if block its first declaration is looked for
_COUNTER = re.compile(r"\+\+|--")  # `++idle < 8192`: a loop's own count, not a size
_ZEROS = frozenset({"0", "0u", "0ul", "0l", "0.0", "0.0f", "0.f"})
_NOT_THRESHOLDS = frozenset({"0", "1", "-1", "0u", "1u", "0ul", "1ul", "0.0", "0.0f", "0.f", "0l", "1l"})


def more_condition_label(lines: list[str], index: int) -> str:
    """'condition on the arch', 'threshold', 'condition kept in a bool', 'condition on a named value' or ''."""
    line = lines[index]
    continued = _CONTINUES.search(line) or (index > 0 and _CONTINUES.search(lines[index - 1]))
    if (continued or _CHOICE.search(line)) and _ARCH.search(line):
        return ARCH_LABEL
    if _BRANCH.search(line) and _ARCH.search(line):
        return ARCH_LABEL
    if _FLAG.match(line):  # a row when one of the two versions compares a number (row_name)
        scope = enclosing_function(lines, index)
        return FLAG_LABEL if scope is not None and not scope.device else ""
    if _RETURNED_TEST.match(line) and _has_threshold(line):  # a predicate: `return seqlen > 128 && ...;`
        scope = enclosing_function(lines, index)
        return THRESHOLD_LABEL if scope is not None and not scope.device else ""
    if not _BRANCH.search(line):
        return ""
    condition = with_open_parentheses(lines, index)
    if _has_threshold(condition) and not _COUNTER.search(line):
        label = THRESHOLD_LABEL
    elif named_values(condition):
        label = NAMED_LABEL
    else:
        return ""
    scope = enclosing_function(lines, index)
    return label if scope is not None and not scope.device else ""


def chooses_by_arch(lines: list[str], index: int) -> bool:
    """Line index, which names an arch, chooses without a branch: a type chosen by std::conditional (on the line
    or continuing one opened up to two lines above) or a value clamped (`cc = min(cc, 90u);`)."""
    line = lines[index]
    if _TYPE_CHOICE.search(line) or _CLAMP.search(line):
        return True
    above = lines[max(index - 2, 0) : index]
    return any(_TYPE_CHOICE.search(text) for text in above) and not any(";" in text for text in above)


def declared_name(lines: list[str], index: int) -> str:
    """What a file-scope condition line chooses, by the name it declares: the alias of `using X = std::conditional
    ...` (on the line or above it in the same statement), else the first constant, alias or macro its #if block
    defines; INCLUDES_ONLY for a block that opens with an #include; ''."""
    if not PP_OPEN.match(lines[index]) and not _PP_SPLIT.match(lines[index]):
        for position, text in enumerate(reversed(lines[max(index - MAX_ALIAS_LINES, 0) : index + 1])):
            if position and (";" in text or "{" in text or "}" in text):
                return ""  # the statement before
            if alias := _USING.search(text):
                return alias["name"]
        return ""
    depth = 0
    for text in lines[index + 1 : index + 1 + MAX_BLOCK_LINES]:
        if depth == 0 and (_INCLUDE.match(text) or _REFUSAL.match(text)):
            return INCLUDES_ONLY  # or a block that refuses to build (#error): it chooses no code
        if PP_OPEN.match(text):
            depth += 1
        elif _PP_SPLIT.match(text):
            if depth == 0:
                return ""
            depth -= text.lstrip().lstrip("#").lstrip().startswith("endif")
        elif depth == 0 and (declared := _DECLARED.search(text)):
            return declared["macro"] or declared["alias"] or declared["constant"]
    return ""


def extends_kept_chain(lines: list[str], index: int, lo: int, hi: int) -> bool:
    """Line index (in lines lo..hi, which the commit adds or removes) is an `else if` of a host function whose previous
    branch the commit keeps (`} else if (algorithm == ALGO_RING && protocol == PROTO_SIMPLE) {` added after a kept
    `if (algorithm == ALGO_TREE) {`): the chain the function decides with gains or loses a case."""
    line = lines[index]
    if _ELSE_IF.match(line) is None:
        return False
    indent = len(line) - len(line.lstrip())
    for earlier in range(index - 1, max(index - MAX_CHAIN_LINES, -1), -1):
        text = lines[earlier]
        if not text.strip() or len(text) - len(text.lstrip()) > indent or text.strip() == "}":
            continue  # a branch's body, or the brace that closes it
        if len(text) - len(text.lstrip()) < indent or not _BRANCH_HEAD.match(text):
            return False  # no chain: another statement, or the block around
        if not lo <= earlier < hi:
            scope = enclosing_function(lines, index)
            return scope is not None and not scope.device
        if _ELSE_IF.match(text) is None:
            return False  # the chain's own `if` is new too: new code
    return False


_ELSE_IF = re.compile(r"^\s*(?:\}\s*)?else\s+if\s*\(")
_BRANCH_HEAD = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?if\s*\(")
MAX_CHAIN_LINES = 120  # how far above an `else if` its previous branch is looked for


def row_name(
    old_lines: list[str], new_lines: list[str], old: tuple[int, str] | None, new: tuple[int, str] | None
) -> tuple[str, str]:
    """(name, key) of the row pairing condition lines old and new ((index, label), either may be None): the function
    the condition is in and what it tests, or the label alone at file scope; ("", "") for no row: a branch of a
    kernel's own code (`__global__` / `__device__`: only its arch conditions pick code), a size compared with 0
    alone (an empty check), a threshold on one side only (a new or dropped test is new or dropped code)."""
    lines, (index, label) = (new_lines, new) if new else (old_lines, old or (0, ""))
    line = lines[index] if index < len(lines) else ""
    if label == SWITCHED_OFF_LABEL:  # in a function, its 'code cut off' row shows it
        return ("", "") if enclosing_function(lines, index) else (label, "")
    if label in (THRESHOLD_LABEL, FLAG_LABEL, NAMED_LABEL, MACRO_LABEL) and not (old and new):
        return "", ""
    if label == NAMED_LABEL and old and named_values(old_lines[old[0]]) == named_values(line):
        return "", ""  # the same values tested: a condition rewritten around them
    if (
        old
        and new
        and old[1] == new[1] in (ARCH_LABEL, THRESHOLD_LABEL, FLAG_LABEL, MACRO_LABEL)
        and _same_gate(old_lines[old[0]], line)
    ):
        return "", ""
    if _spelling_shim(lines, directive_start(lines, index)):
        return "", ""
    numbers = _compared_numbers(line)
    if label == BATCH_LABEL and numbers and all(number in _ZEROS for number in numbers):
        return "", ""
    scope = enclosing_function(lines, index)
    guarded = label == ARCH_LABEL and not (old and new) and (scope is None or scope.device)
    if guarded and compile_guard(lines, directive_start(lines, index)):
        return "", ""  # code built for some arches only: no other path runs
    if label == PLATFORM_LABEL and (scope is None or _port_shim(lines, index)):
        return "", ""  # a file's own port to HIP (compared where it is used), or the same calls on each platform
    if scope is None:
        declared = declared_name(lines, directive_start(lines, index))
        if declared == INCLUDES_ONLY:
            return "", ""  # the code that uses what it includes is compared where it is
        return (declared, label) if declared else (label, "")
    if scope.device and label not in (ARCH_LABEL, MACRO_LABEL):  # the preprocessor's choices, not the kernel's
        return "", ""
    if not (old and new) and not defined_in(scope.function, old_lines if new else new_lines):
        return "", ""  # a test in a function the commit adds or removes whole: new or dropped code
    return scope.function, label


def compile_guard(lines: list[str], index: int) -> bool:
    """An `#if` (line index) whose `#else` holds only a diagnostic (`#warning "only on Ampere"`, `#error`, `__trap();`,
    `assert(false);`): its code is built for some arches and stubbed out on the others, no other path is taken. An
    `#if` with no `#else`, or with an `#elif`, may let the code after it run instead, so it is no guard."""
    if not PP_OPEN.match(lines[index]):
        return False
    depth, in_else = 0, False
    for text in lines[index + 1 : index + 1 + MAX_GUARD_LINES]:
        if PP_OPEN.match(text):
            if in_else:
                return False
            depth += 1
        elif depth:
            depth -= PP_END.match(text) is not None
        elif PP_END.match(text):
            return in_else
        elif PP_ELSE.match(text):
            in_else = True
        elif _PP_SPLIT.match(text):
            return False  # an #elif: another arch's path
        elif in_else and text.strip() and not _DIAGNOSTIC.match(text):
            return False
    return False


_DIAGNOSTIC = re.compile(
    r"^\s*(?:#\s*(?:warning|error|pragma\s+message)\b|(?:assert|static_assert)\s*\(\s*(?:false|0)\b|"
    r"(?:__trap|__builtin_trap|abort)\s*\(\s*\)\s*;)"
)


def _spelling_shim(lines: list[str], index: int) -> bool:
    """An `#if` whose branches are the same code but for names spelled longer in one (`using type = double4_32a;` /
    `#else` / `using type = double4;`: a toolkit's new spelling of the same type or field)."""
    branches = _if_else(lines, index)
    if branches is None:
        return False
    if_side, else_side = ([token for text in branch for token in _TOKEN.findall(text)] for branch in branches)
    if len(if_side) != len(else_side) or if_side == else_side:
        return False
    return all(a == b or (_NAME.match(a) is not None and (a.startswith(b) or b.startswith(a)))
               for a, b in zip(if_side, else_side, strict=True))  # fmt: skip


def _port_shim(lines: list[str], index: int) -> bool:
    """A platform `#if` whose `#if` and `#else` branches make the same calls (`cudaFuncSetAttribute(kernel, ...)` /
    `cudaFuncSetAttribute((void *) kernel, ...)`): a signature told apart, not another path."""
    branches = _if_else(lines, index)
    if branches is None:
        return False
    if_side, else_side = (
        {name for text in branch for name in _CALLED.findall(_STRING.sub('""', text))} for branch in branches
    )
    return bool(if_side) and if_side == else_side


def _if_else(lines: list[str], index: int) -> list[list[str]] | None:
    """The lines of the `#if` and the `#else` branch of the block that line index opens (after the directive's
    continuation lines), up to its `#elif` or `#endif` (MAX_BLOCK_LINES at most); None when line index opens no `#if`,
    the block holds another or it has not two branches."""
    if not PP_OPEN.match(lines[index]):
        return None
    last = directive_end(lines, index)
    branches: list[list[str]] = [[]]
    for text in lines[last + 1 : last + 1 + MAX_BLOCK_LINES]:
        if PP_OPEN.match(text):
            return None
        if PP_ELSE.match(text):
            branches.append([])
        elif _PP_SPLIT.match(text):
            break
        else:
            branches[-1].append(text)
    return branches if len(branches) == 2 else None


_CALLED = re.compile(r"([A-Za-z_]\w*)\s*\(")
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\S")
_NAME = re.compile(r"[A-Za-z_]")


def _same_gate(old: str, new: str) -> bool:
    """An arch or threshold test written another way: the same numbers (`gcnArch == 908` -> `gcnArchName.find("908") !=
    npos`), the same order comparisons, logic (&&, ||, !), arithmetic, named constants and arch names on both
    lines; an `#if` that became an `#elif` is no such rewrite (a test now comes before it)."""
    if _DIRECTIVE_WORD.findall(old) != _DIRECTIVE_WORD.findall(new):
        return False
    return all(sorted(pattern.findall(old)) == sorted(pattern.findall(new)) for pattern in _GATE_PARTS)


_DIRECTIVE_WORD = re.compile(r"^\s*#\s*(if|elif)\b")


_GATE_PARTS = (
    re.compile(r"\d+"),
    re.compile(r"(?<![<>-])(?:<=|>=|<(?!<)|>(?!>))"),
    re.compile(r"&&|\|\||!(?!=)"),
    re.compile(r"[*/%+]|-(?!>)|\bsizeof\b"),  # a size scaled (`n * sizeof(T) <= LIMIT`) is another test
    re.compile(r"\b[A-Z][A-Z0-9_]{2,}\b|(?i:\b\w*(?:volta|turing|ampere|hopper|blackwell|pascal|maxwell|kepler)\w*)"),
)


def named_values(condition: str) -> frozenset[str]:
    """The upper-case named values a condition compares with (`path->type == PATH_NVL || path->type == PATH_NVB`),
    leaving out status codes (`err != NCCL_SUCCESS`)."""
    return frozenset(
        name
        for match in _NAMED_VALUE.finditer(condition)
        if not _STATUS.search(name := match["right"] or match["left"])
    )


_NAMED_VALUE = re.compile(
    r"(?:==|!=|<=|>=|(?<![<-])<(?!<)|(?<![>-])>(?!>))\s*(?P<right>[A-Z][A-Z0-9]*_[A-Z0-9_]+)\b(?!\s*\()|"
    r"(?<![\w.>])(?P<left>[A-Z][A-Z0-9]*_[A-Z0-9_]+)\s*(?:==|!=|<=|>=|<(?!<)|>(?!>))"
)
_STATUS = re.compile(r"SUCCESS|ERROR|FAIL|_OK\b|INVALID|STATUS|_NULL\b|NULLPTR")


def _compared_numbers(line: str) -> list[str]:
    return [(match["right"] or match["left"]).lower() for match in _NUMBER_TEST.finditer(line)]


def _has_threshold(line: str) -> bool:
    """A comparison with a number other than 0 / 1, or with a threshold's name (`<= AR_SIZE_THRESHOLD`)."""
    if _NAMED_THRESHOLD.search(line):
        return True
    return any(number not in _NOT_THRESHOLDS for number in _compared_numbers(line))
