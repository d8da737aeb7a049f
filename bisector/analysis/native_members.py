"""The struct or class a C++ constant is a member of, so that its row names it: `static constexpr int nbatch_fa =
64;` in `struct fattn_mma_f16_config<192, 128> {` is `fattn_mma_f16_config<192, 128>::nbatch_fa` (each
specialization of a config template holds the same member names)."""

from __future__ import annotations

import bisect
import re

_KEYWORD = re.compile(r"(?:struct|class)\s")  # no \b or lookbehind: they make the search ~5x slower
_HEAD = re.compile(
    r"(?:alignas\s*\([^)]*\)\s*)?(?P<name>[A-Za-z_]\w*(?:\s*<(?:[^<>{};]|<[^<>{};]*>)*>)?)"
    r"\s*(?:final\s*)?(?::[^{};]*)?$"
)
_BRACE = re.compile(r"[{}]")
MAX_HEAD_CHARS = 400  # a struct head (name, template arguments, bases) before its brace


class Members:
    """The aggregates (struct, class) of one file's comment-stripped text, by the span of their bodies."""

    def __init__(self, stripped: str) -> None:
        heads: dict[int, str] = {}
        for keyword in _KEYWORD.finditer(stripped):
            before = stripped[max(0, keyword.start() - 5) : keyword.start()]
            if (
                before[-1:].isalnum()
                or before[-1:] == "_"
                or before.endswith("enum ")
                or before.strip()[-1:] in ("<", ",")
            ):
                continue  # inside a name, `enum class`, or a template parameter: `template <class T>`
            window = stripped[keyword.end() : keyword.end() + MAX_HEAD_CHARS]
            cut = min((at for at in (window.find("{"), window.find(";")) if at >= 0), default=-1)
            if cut >= 0 and window[cut] == "{" and (head := _HEAD.match(window[:cut].strip())) is not None:
                heads[keyword.end() + cut] = " ".join(head["name"].split())
        self._heads = heads
        self._stripped = stripped
        self._braces: list[tuple[int, bool]] | None = None  # (position, opens), read when first asked
        self._positions: list[int] = []

    def qualified(self, name: str, position: int) -> str:
        """name, prefixed with the aggregate whose body holds position directly (`Config<4>::name`): the first
        brace above it that no brace between them closes."""
        if not self._heads:
            return name
        if self._braces is None:
            self._braces = [(match.start(), match[0] == "{") for match in _BRACE.finditer(self._stripped)]
            self._positions = [at for at, _ in self._braces]
        depth = 0
        for at in range(bisect.bisect_left(self._positions, position) - 1, -1, -1):
            brace, opens = self._braces[at]
            if not opens:
                depth += 1
            elif depth:
                depth -= 1
            else:
                return f"{self._heads[brace]}::{name}" if brace in self._heads else name
        return name
