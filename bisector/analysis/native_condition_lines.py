"""The condition lines of C / C++ / CUDA that a hunk removes and adds: a size compared in an if / while / ?: (a batch
size by its name), a case of a switch on the batch size, the arch, a dtype or a version tested (in an `if`, a `#if`
and the lines that continue it, a bool or a `?:`), the `#else` of an arch `#if` (native_directives.py), a project's
macro compared with a number or tested for being defined in an `#if` (`#if USE_STAGGERED_INDICES == 1 && GEMMK == 0`:
the kernel's build-time tuning parameters; `#if defined(CUCO_HAS_CUDA_BARRIER)`), a switch macro's condition and a
test guarding a launch. Each removed line is paired with an added one in order and the pair named by
native_conditions.row_name; a test of the arch, a dtype, a version or a macro picks a code path (a branch_condition
row), the others are thresholds. A threshold or named-value test added or removed alone is a row when it is an `else
if` of a chain the commit keeps. A condition line removed or added alone whose test the hunk's other side writes in
another form (`if constexpr (c)` -> `AF_IF_CONSTEXPR(c)`, native_value_forms.py) is no row."""

from __future__ import annotations

import re

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.native_conditions import (
    ARCH_LABEL,
    MACRO_LABEL,
    NAMED_LABEL,
    PLATFORM_LABEL,
    SWITCHED_OFF_LABEL,
    THRESHOLD_LABEL,
    chooses_by_arch,
    extends_kept_chain,
    more_condition_label,
    row_name,
)
from bisector.analysis.native_directives import IF_ZERO, directive_start, else_of_arch_test
from bisector.analysis.native_dispatch import condition_label, default_rows
from bisector.analysis.native_reach import MAX_READER_LINES, guards_launch, instantiating_case, reaching_values
from bisector.analysis.native_scope import enclosing_function
from bisector.analysis.native_value_forms import tested_again
from bisector.vocab.gitdiff import Hunk, line_text, unmoved

# Names that hold the batch size (rows of the activation) in GEMM and attention dispatchers.
_BATCH_NAMES = (
    r"m|M|bs|BS|batch|batch_size|batchsize|num_tokens|n_tokens|num_seqs|n_seqs|tokens|num_rows|n_rows|rows|"
    r"m_size|size_m|problem_m|batch_m|num_batch|max_batch_size|\w+_bs|bs_\w+|\w*batch_size\w*"
)
_COMPARISON = (
    rf"(?:\b(?:{_BATCH_NAMES})\b\s*(?:<=|>=|==|!=|<(?!<)|>(?!>))"
    rf"|(?:<=|>=|==|!=|(?<!<)<|(?<![->])>)\s*\b(?:{_BATCH_NAMES})\b)"
)
# a comparison in an if / while / ?:, in a flag accumulated with |= or &= (success |= block_m <= m), or on a
# continuation line of a boolean expression (&& block_m <= m)
_CONDITION = re.compile(
    rf"(?:\b(?:if|while)\s*\(|\?|[|&]=|^\s*(?:and\b|or\b|&&|\|\|)).*?{_COMPARISON}|{_COMPARISON}.*\?"
)
# a branch, a condition kept in a bool (`bool is_sm90 = major == 9;`) or a check that refuses the other case
_BRANCH = re.compile(
    r"^\s*#\s*(?:if|elif|ifdef|ifndef)\b|\b(?:if|while)\s*(?:constexpr\s*)?\(|\?|"
    r"\bbool\s+[A-Za-z_]\w*\s*=[^=]|\b(?:TORCH_CHECK|AT_ASSERTM?|TORCH_INTERNAL_ASSERT)\s*\("
)
_ARCH_WORDS = re.compile(
    r"__CUDA_ARCH\w*__|__CUDA_ARCH_\w+|__gfx\w+|\bgfx\d+|\b\w*sm_?\d{2,3}\w*|\b\w*SM_?\d{2,3}\w*|compute_capability|"
    r"\b(?:major|minor)\s*[<>=!]=?\s*\d|"
    r"\bcc\s*[<>=!]=?|\barch\b|NV_PROVIDES_SM\w*|NV_IS_EXACTLY_SM\w*|__HIP_ARCH\w*|\bCUDA_VERSION\b|__CUDACC_VER_\w+|"
    r"\b[A-Z][A-Z0-9_]*_(?:ARCH|CC)\b|\bSm\d{2,3}\b|"  # a project's arch macro (TCNN_MIN_GPU_ARCH), CUTLASS's Sm80
    r"\b\w*GFX\d+\w*"  # an AMD arch in a project's macro (ROCWMMA_ARCH_GFX1100, __GFX9__)
)
# the device a host function runs on, asked for its vendor, its model or a feature (`if (props.vendorID == 0x5143)`,
# `if (!info.support_bf16_storage())`, `mayiuse_int8(device)`): like the arch, it picks the code path for that device
_DEVICE_WORDS = re.compile(
    r"\b\w*(?:vendorID|vendorId|vendor_id)\s*[=!]=|\b\w*(?:deviceID|deviceId)\s*[=!]=\s*0x[0-9A-Fa-f]+|"
    r"\b(?:supports?|mayiuse|isa_has|cpu_has)_\w+\s*\(|\b\w*has_\w+_support\s*\(|\bis_\w+_supported\s*\("
)
# numeric element types by name (is_same_v<T, Ctx> and sizeof(T) checks pick template paths of all kinds: not these)
_DTYPE_WORDS = re.compile(
    r"\b(?:half|__half|__nv_bfloat16|bfloat16(?:_t)?|__nv_fp8\w*|fp8\w*|float8\w*|fp4\w*|bf16|fp16|\w*e4m3\w*|\w*e5m2\w*)\b|"
    r"\bis_same(?:_v)?\s*<[^;]*\b(?:float|double|u?int8_t)\b"
)
# a build's dtype macro tested by the preprocessor (`#if defined(ENABLE_BF16)`): a condition inside a host function
# only (a header's `#ifdef FP16_MODE` picks the types of the whole build, compared where they are used)
_DTYPE_MACRO = re.compile(r"^\s*#\s*(?:if|elif|ifdef|ifndef)\b.*\b[A-Z0-9_]*(?:BF16|FP16|FP8|FP4|BFLOAT16)[A-Z0-9_]*\b")
_VERSION_WORDS = re.compile(r"\b[A-Z][A-Z0-9]*_VERSION(?:_[A-Z]+)?\b")  # a library's version: CUBLAS_VERSION
# the toolkit a build targets, HIP / ROCm or CUDA: `#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)`
_PLATFORM_WORDS = re.compile(r"__HIP_PLATFORM_\w+__|__HIPCC__|__HCC__|\b__HIP__\b|\bUSE_ROCM\b")
_CONTINUED = re.compile(r"^\s*(?:&&|\|\|)|(?:&&|\|\|)\s*$")  # a line of a boolean expression spread over lines
_CASE = re.compile(r"^\s*case\s+[^:]+:")
_BOOL_LITERAL = re.compile(r"^\s*(?:(?:static|const|constexpr|inline)\s+)*bool\s+\w+\s*=\s*(?:true|false|0|1)\s*;")
_SWITCH = re.compile(rf"\bswitch\s*\(\s*([^)]*\b(?:{_BATCH_NAMES})\b[^)]*)\)")
_ANY_SWITCH = re.compile(r"\bswitch\s*\(")
_ANY_SWITCH_ON = re.compile(r"\bswitch\s*\(\s*([^)]*)\)")


def condition_rows(path: str, hunk: Hunk, old_lines: list[str], new_lines: list[str]) -> list[Finding]:
    """The condition lines (batch size, arch, dtype, case, switch macro) that the hunk removes and adds, paired in
    order (a line removed and added with the same text only moved) and named by their function, then defaults."""
    removed = [(i, label) for i in range(hunk.old_lo, hunk.old_hi) if (label := _condition(old_lines, i))]
    added = [(i, label) for i in range(hunk.new_lo, hunk.new_hi) if (label := _condition(new_lines, i))]
    removed, added = unmoved(removed, added, old_lines, new_lines)
    findings: list[Finding] = []
    old_hunk, new_hunk = old_lines[hunk.old_lo : hunk.old_hi], new_lines[hunk.new_lo : hunk.new_hi]
    for position in range(max(len(removed), len(added))):
        old = removed[position] if position < len(removed) else None
        new = added[position] if position < len(added) else None
        if old is None and new is not None and tested_again(new_lines[new[0]], old_hunk):
            continue  # the same test, written another way (`AF_IF_CONSTEXPR(c)` for `if constexpr (c)`)
        if new is None and old is not None and tested_again(old_lines[old[0]], new_hunk):
            continue
        name, key = row_name(old_lines, new_lines, old, new)
        if not name:
            name, key = _chain_case(old_lines, new_lines, old, new, hunk)
        if not name:
            continue  # a kernel's own branch, an empty check, a new threshold (row_name)
        findings.append(
            Finding(
                kind=_condition_kind(old_lines, new_lines, old, new),
                file=path,
                name=name,
                key=key,
                before=line_text(old_lines[old[0]]) if old else None,
                after=line_text(new_lines[new[0]]) if new else None,
                line=(new[0] + 1) if new else (old[0] + 1) if old else None,
            )
        )
    line = hunk.new_lo + 1 if new_hunk else None
    after = new_lines[hunk.new_hi : hunk.new_hi + MAX_READER_LINES]
    return (
        findings + default_rows(path, old_hunk, new_hunk, line) + reaching_values(path, old_hunk, new_hunk, after, line)
    )


def _chain_case(
    old_lines: list[str], new_lines: list[str], old: tuple[int, str] | None, new: tuple[int, str] | None, hunk: Hunk
) -> tuple[str, str]:
    """(function, label) for a threshold or named-value test added or removed alone as an `else if` of a chain the
    commit keeps (native_conditions.extends_kept_chain), else ("", "")."""
    if new is not None and old is None and new[1] in _CHAIN_LABELS:
        lines, index, lo, hi = new_lines, new[0], hunk.new_lo, hunk.new_hi
    elif old is not None and new is None and old[1] in _CHAIN_LABELS:
        lines, index, lo, hi = old_lines, old[0], hunk.old_lo, hunk.old_hi
    else:
        return "", ""
    scope = enclosing_function(lines, index)
    if scope is None or not extends_kept_chain(lines, index, lo, hi):
        return "", ""
    return scope.function, (new or old or (0, ""))[1]


def _condition_kind(
    old_lines: list[str], new_lines: list[str], old: tuple[int, str] | None, new: tuple[int, str] | None
) -> FindingKind:
    """A test of the arch, a dtype or a version picks a code path (a branch condition); a size compared with a
    number, a case of a switch on the batch size or a test guarding a launch is a threshold, unless both versions
    compare the same numbers the same ways (`if (n <= 32)` -> `if (n <= 32 && !split_k_only)`: the test around
    the threshold changed, a branch condition)."""
    label = (new or old or (0, ""))[1]
    if label in _PATH_LABELS:
        return FindingKind.BRANCH_CONDITION
    if old and new and label == old[1]:
        before, after = old_lines[old[0]], new_lines[new[0]]
        if all(sorted(part.findall(before)) == sorted(part.findall(after)) for part in _THRESHOLD_PARTS):
            return FindingKind.BRANCH_CONDITION
    return FindingKind.NATIVE_THRESHOLD


_THRESHOLD_PARTS = (re.compile(r"(?<![\w.])\d[\w.]*"), re.compile(r"<=|>=|==|!=|(?<![<-])<(?!<)|(?<![>-])>(?!>)"))
_CHAIN_LABELS = frozenset({THRESHOLD_LABEL, NAMED_LABEL})  # a case an if chain gains (extends_kept_chain)
_PATH_LABELS = frozenset({
    ARCH_LABEL, PLATFORM_LABEL, NAMED_LABEL, MACRO_LABEL, SWITCHED_OFF_LABEL, "condition on the dtype",
    "condition on the version",
})  # fmt: skip
# `#if USE_STAGGERED_INDICES == 1 && GEMMK == 0`: a macro compared with a number picks the code a kernel is built
# with (its tuning parameters come as -D defines); the compiler's and the language's own macros pick no kernel code
_MACRO_COMPARED = re.compile(
    r"\b(?P<macro>[A-Z_][A-Z0-9_]*)\s*(?:==|!=|<=|>=|<(?!<)|>(?!>))\s*\(?\s*-?\d|"
    r"(?<![\w)])-?\d[\w.]*\s*\)?\s*(?:==|!=|<=|>=|<(?!<)|>(?!>))\s*(?P<right>[A-Z_][A-Z0-9_]*)\b"
)
_PREPROCESSOR_TEST = re.compile(r"^\s*#\s*(?:if|elif)\b")
_TOOLCHAIN_MACROS = re.compile(
    r"^_MSC|^__GNUC|^__clang|^__cplusplus$|^__STDC|^__INTEL|^__NVCC|^__CUDACC|^__HIPCC|^_WIN|^__APPLE|^__linux|"
    r"^__SIZEOF|^__BYTE_ORDER|^_POSIX|^_XOPEN|^__has_"
)


def _macro_compared(line: str) -> bool:
    """An `#if` / `#elif` comparing a macro of the project with a number or testing whether one is defined (`#if
    defined(CUCO_HAS_CUDA_BARRIER)`, `#ifdef USE_FAST_PATH`; not an include guard)."""
    if (ifdef := _IFDEF.match(line)) is not None:
        names = [ifdef["name"]]
    elif _PREPROCESSOR_TEST.match(line):
        names = _DEFINED_NAME.findall(line)
        names += [match["macro"] or match["right"] for match in _MACRO_COMPARED.finditer(line)]
    else:
        return False
    return any(not _TOOLCHAIN_MACROS.match(name) and not _GUARD.search(name) for name in names)


_IFDEF = re.compile(r"^\s*#\s*ifn?def\s+(?P<name>[A-Za-z_]\w*)")
_DEFINED_NAME = re.compile(r"\bdefined\s*\(?\s*([A-Za-z_]\w*)")
_GUARD = re.compile(r"_(?:H|HH|HPP|HXX|CUH|INL|INC|INCLUDED|GUARD)_*$")


def _condition(lines: list[str], index: int) -> str:
    """'condition on the batch size', 'case of switch (m)', 'condition on the arch' (#if __CUDA_ARCH__ >= 900,
    if (cc >= 90)) or 'condition on the dtype' (if constexpr (is_same_v<T, half>)) when line index is one, else ''.
    A bool initialised with a literal (`bool fp16 = false;`) holds no condition."""
    if index >= len(lines) or _BOOL_LITERAL.match(lines[index]):
        return ""
    line = lines[index]
    if _CASE.match(line):
        for earlier in range(index, max(index - 200, -1), -1):
            if _ANY_SWITCH.search(lines[earlier]):
                switch = _SWITCH.search(lines[earlier]) or (
                    _ANY_SWITCH_ON.search(lines[earlier]) if instantiating_case(lines, index) else None
                )
                return f"case of switch ({' '.join(switch[1].split())})" if switch else ""
        return ""
    if _CONDITION.search(line):
        return "condition on the batch size"
    branch = _BRANCH.search(line) is not None
    if _ARCH_WORDS.search(line) and (branch or chooses_by_arch(lines, index) or directive_start(lines, index) != index):
        return "condition on the arch"
    if else_of_arch_test(lines, index, _ARCH_WORDS):
        return "condition on the arch"
    if _DEVICE_WORDS.search(line) and (branch or _continues_test(lines, index)):
        return "condition on the arch"
    if branch and _DTYPE_WORDS.search(line):
        return "condition on the dtype"
    if _DTYPE_MACRO.match(line) and enclosing_function(lines, index) is not None:
        return "condition on the dtype"
    if branch and _VERSION_WORDS.search(line):
        return "condition on the version"
    if branch and _PLATFORM_WORDS.search(line):
        return PLATFORM_LABEL
    if IF_ZERO.match(line):
        return SWITCHED_OFF_LABEL
    if _macro_compared(line):
        return MACRO_LABEL
    label = condition_label(line) or ("condition choosing the kernel" if guards_launch(lines, index) else "")
    return label or more_condition_label(lines, index)


def _continues_test(lines: list[str], index: int) -> bool:
    return _CONTINUED.search(lines[index]) is not None or (
        index > 0 and _CONTINUED.search(lines[index - 1]) is not None
    )
