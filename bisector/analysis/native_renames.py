"""Names a commit renames in a C / C++ / CUDA file, so that a value that differs only by them is no change:

    nominal_4b_items -> nominal_4B_items        the same name in another spelling (case, underscores)
    const int ntiles_total = ...;  -> const int ntiles_dst = ...;
                                                a constant or local declared under another name

In both the old name is gone from the file and the new one was not in it; a declared rename also needs the old
name declared only before the commit and the new one only after (a call to another function is no rename). Names
renamed in a chain or a swap (`_X -> X` while `X -> X_`: reserved identifiers renamed) keep both in the file: such a
pair is a rename when the file's changed lines, paired in order, rename each name one way only and the old name left
in the file, or the new one already in it, is itself renamed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from typing import Protocol

from bisector.analysis.values import Leaf, Node

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\S")


class Scanned(Protocol):
    @property
    def lines(self) -> list[str]: ...

    @property
    def entries(self) -> Mapping[str, object]: ...


class Renames:
    """Names spelled or declared differently on the two sides of a file."""

    def __init__(self, before: Scanned | None, after: Scanned | None) -> None:
        self._texts = ("\n".join(before.lines) if before else "", "\n".join(after.lines) if after else "")
        self._declared = (_declared(before.entries if before else ()), _declared(after.entries if after else ()))
        self._names: tuple[set[str], set[str]] | None = None
        self._chain: dict[str, str] | None = None

    def same(self, old: Node, new: Node) -> bool:
        if not (isinstance(old, Leaf) and isinstance(new, Leaf)) or old.text == new.text:
            return False
        old_tokens, new_tokens = _TOKEN.findall(old.text), _TOKEN.findall(new.text)
        if len(old_tokens) != len(new_tokens):
            return False
        pairs = {(a, b) for a, b in zip(old_tokens, new_tokens, strict=True) if a != b}
        return all(self._renamed(a, b) and (_spelling(a) == _spelling(b) or self._redeclared(a, b)) for a, b in pairs)

    def _renamed(self, old: str, new: str) -> bool:
        if not (_IDENTIFIER.fullmatch(old) and _IDENTIFIER.fullmatch(new)):
            return False
        if self._names is None:
            self._names = (set(_IDENTIFIER.findall(self._texts[0])), set(_IDENTIFIER.findall(self._texts[1])))
        if old not in self._names[1] and new not in self._names[0]:
            return True
        if self._chain is None:
            self._chain = _renamed_names(self._texts[0].splitlines(), self._texts[1].splitlines())
        chain = self._chain
        return (
            chain.get(old) == new
            and (old not in self._names[1] or old in chain.values())
            and (new not in self._names[0] or new in chain)
        )

    def _redeclared(self, old: str, new: str) -> bool:
        before, after = self._declared
        return old in before and old not in after and new in after and new not in before


def _renamed_names(old_lines: list[str], new_lines: list[str]) -> dict[str, str]:
    """The names the changed lines rename, each old name to one new name and no two to one ({} when not so): the
    lines of a replaced block paired in order, each pair the same tokens but for names."""
    renames: dict[str, str] = {}
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, old_lo, old_hi, new_lo, new_hi in matcher.get_opcodes():
        if tag != "replace" or old_hi - old_lo != new_hi - new_lo:
            continue
        for old_line, new_line in zip(old_lines[old_lo:old_hi], new_lines[new_lo:new_hi], strict=True):
            old_tokens, new_tokens = _TOKEN.findall(old_line), _TOKEN.findall(new_line)
            if len(old_tokens) != len(new_tokens):
                continue
            for a, b in zip(old_tokens, new_tokens, strict=True):
                if a == b:
                    continue
                if not (_IDENTIFIER.fullmatch(a) and _IDENTIFIER.fullmatch(b)) or renames.setdefault(a, b) != b:
                    return {}
    return renames if len(set(renames.values())) == len(renames) else {}


def _declared(names: Collection[str]) -> set[str]:
    return {name.split("#", 1)[0] for name in names if not name.startswith("#define")}


def _spelling(name: str) -> str:
    return name.replace("_", "").lower()
