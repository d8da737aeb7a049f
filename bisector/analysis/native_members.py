"""The struct or class a C++ constant is a member of, so that its row names it: `static constexpr int nbatch_fa =
64;` in `struct fattn_mma_f16_config<192, 128> {` is `fattn_mma_f16_config<192, 128>::nbatch_fa` (each
specialization of a config template holds the same member names)."""

from __future__ import annotations

import bisect
import re

_AGGREGATE_HEAD = re.compile(
    r"\b(?:struct|class)\s+(?:alignas\s*\([^)]*\)\s*)?(?P<name>[A-Za-z_]\w*(?:\s*<(?:[^<>{};]|<[^<>{};]*>)*>)?)"
    r"\s*(?:final\s*)?(?::[^{};]*)?$"
)
_BRACE = re.compile(r"[{};]")


class Members:
    """The aggregates (struct, class) of one file's comment-stripped text, by the span of their bodies."""

    def __init__(self, stripped: str) -> None:
        self._spans: list[tuple[int, int, str]] = []
        stack: list[tuple[int, str]] = []  # per open brace: its position and the aggregate it opens ("" if none)
        last = -1
        for match in _BRACE.finditer(stripped):
            index = match.start()
            if match[0] == "{":
                head = _AGGREGATE_HEAD.search(stripped[last + 1 : index].strip())
                stack.append((index, " ".join(head["name"].split()) if head else ""))
            elif match[0] == "}" and stack:
                opened, name = stack.pop()
                if name:
                    self._spans.append((opened, index, name))
            last = index
        self._spans.sort()
        self._starts = [start for start, _, _ in self._spans]

    def qualified(self, name: str, position: int) -> str:
        """name, prefixed with the innermost aggregate whose body holds position directly (`Config<4>::name`)."""
        at = bisect.bisect_right(self._starts, position)
        holders = [span for span in self._spans[:at] if span[0] < position < span[1]]
        return f"{holders[-1][2]}::{name}" if holders else name
