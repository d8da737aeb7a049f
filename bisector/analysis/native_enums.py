"""Enumerators that hold a class's compile-time numbers, the traits idiom of C++ headers written before
`static constexpr` (rocWMMA's `struct VecWidthTraits { enum : uint32_t { ElementsPerIO = TestWidth * WAVE_SIZE,
MaxVectorWidth = ... ? TestWidth : ... }; };`): each enumerator given a value in a plain enum declared directly in a
struct or class is a constant of that class, named `Class::Enumerator` as native_members names its members. An
`enum class` / `enum struct` (scoped: names of cases, not numbers) and an enum at namespace or file scope (error
codes, kinds) hold no such constants."""

from __future__ import annotations

import re
from collections.abc import Iterator

from bisector.analysis.native_members import Members

# a plain enum's head up to its brace: `enum {`, `enum : uint32_t {`, `enum Traits : uint32_t {`
_ENUM_HEAD = re.compile(r"\benum\s+(?!class\b|struct\b)(?:[A-Za-z_]\w*\s*)?(?::\s*[\w:\s]+?)?\{|\benum\s*\{")
_ENUMERATOR = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>\S.*?)\s*$", re.S)
MAX_ENUM_CHARS = 4000  # an enum's body longer than this is a list of cases, not a class's numbers


def class_enumerators(stripped: str, members: Members) -> Iterator[tuple[str, str, int]]:
    """(Class::Enumerator, value text, position of the name) for each enumerator with a value of a plain enum declared
    directly in a struct or class of the comment-stripped text."""
    for head in _ENUM_HEAD.finditer(stripped):
        owner = members.qualified("", head.start())
        if not owner:
            continue  # namespace or file scope
        close = stripped.find("}", head.end(), head.end() + MAX_ENUM_CHARS)
        if close < 0:
            continue
        offset = head.end()
        for piece in _enumerators(stripped[head.end() : close]):
            match = _ENUMERATOR.match(piece)
            if match is not None:
                yield f"{owner}{match['name']}", " ".join(match["value"].split()), offset + match.start("name")
            offset += len(piece) + 1


def _enumerators(body: str) -> list[str]:
    """The body split at its top-level commas: not those inside parentheses, brackets or a template's argument list
    (`Traits<A, B / 2>::value`; a `<` right after a name opens one, a spaced `<` compares)."""
    pieces, depth, angles, start = [], 0, 0, 0
    for index, char in enumerate(body):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "<" and index and (body[index - 1].isalnum() or body[index - 1] == "_"):
            angles += 1
        elif char == ">" and angles and body[index - 1] != "-":
            angles -= 1
        elif char == "," and depth == 0 and angles == 0:
            pieces.append(body[start:index])
            start = index + 1
    pieces.append(body[start:])
    return pieces
