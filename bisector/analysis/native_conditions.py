"""More C / C++ / CUDA condition lines (native.py's `_condition` asks here after its own labels): the arch named in
a line that continues a boolean expression (`(dprops->major == 10 && dprops->minor == 0) ||`), in a bool or a `?:`
(`bool is_sm8x = cc_major == 8 && cc_minor > 0;`, `TargetIsVolta(target) ? 16 : 8`), and a threshold: a size
compared with a number (other than 0 or 1: those test for empty, null or errors) in an `if` / `while` / `?:` of a
host function (a kernel's own branches are its body), a row when the commit changes it (native.py keeps the pairs: a
new test alone is new code)."""

from __future__ import annotations

import re

from bisector.analysis.native_scope import enclosing_function

ARCH_LABEL = "condition on the arch"
THRESHOLD_LABEL = "threshold"

_ARCH = re.compile(
    r"\b\w*(?:major|minor)\s*[<>=!]=\s*\d|\b\w*(?:major|minor)\s*[<>]\s*\d|"
    r"\b\w*(?:Volta|Turing|Ampere|Hopper|Blackwell|Pascal|Maxwell|Kepler)\w*\b"
)
_CONTINUES = re.compile(r"^\s*(?:&&|\|\||and\b|or\b)|(?:&&|\|\|)\s*$")
_CHOICE = re.compile(r"\bbool\s+[A-Za-z_]\w*\s*=[^=]|\?[^:]*:")
_BRANCH = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|while)\s*(?:constexpr\s*)?\(|\?[^:]*:")
_NUMBER_TEST = re.compile(
    r"(?:[<>]=?|[=!]=)\s*\(?\s*(?P<right>-?\d[\w.]*)|(?P<left>(?<![\w.])-?\d[\w.]*)\s*\)?\s*(?:[<>]=?|[=!]=)(?!=)"
)
_COUNTER = re.compile(r"\+\+|--")  # `++idle < 8192`: a loop's own count, not a size
_NOT_THRESHOLDS = frozenset({"0", "1", "-1", "0u", "1u", "0ul", "1ul", "0.0", "0.0f", "0.f", "0l", "1l"})


def more_condition_label(lines: list[str], index: int) -> str:
    """'condition on the arch', 'threshold' or ''."""
    line = lines[index]
    continued = _CONTINUES.search(line) or (index > 0 and _CONTINUES.search(lines[index - 1]))
    if (continued or _CHOICE.search(line)) and _ARCH.search(line):
        return ARCH_LABEL
    if _BRANCH.search(line) and _ARCH.search(line):
        return ARCH_LABEL
    if _BRANCH.search(line) and _has_threshold(line) and not _COUNTER.search(line):
        scope = enclosing_function(lines, index)
        if scope is not None and not scope.device:
            return THRESHOLD_LABEL
    return ""


def _has_threshold(line: str) -> bool:
    for match in _NUMBER_TEST.finditer(line):
        number = (match["right"] or match["left"]).lower()
        if number not in _NOT_THRESHOLDS:
            return True
    return False
