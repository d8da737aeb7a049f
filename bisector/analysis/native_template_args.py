"""Numbers passed as C++ template arguments: the configuration a type carries. A per-arch or per-type
specialisation of a config template (`template<> struct default_sort_config<gfx90a, double> : sort_config<256, 8>
{};`), a class's config alias (`using type = select_type<select_type_case<sizeof(Key) == 1, sort_config<64U>>,
...>;`), a class template's parameter defaults and the traits a host function instantiates its kernel with
(`run_flash_fwd<Kernel_traits<D, 128, 64, 8, false>>(params, stream);`, a CUTLASS `using GemmKernel =
DefaultGemmGrouped<float, ..., 4, ...>::GemmKernel;`) are tuning tables written as types. A hunk that changes the
numbers (or true / false) in such an argument list is a row: `constant` named by the template specialised, the
class, or the alias at file scope, when both versions name it (a specialisation added to a template both have is a
new entry of its table); `dispatch_logic` named by the host function, when both versions have it (the kernel it
instantiates is configured otherwise), as is a config alias of a host function that picks another config template
(`using config = default_or_custom_config<Config, default_scan_by_key_config<...>>;`, was `default_scan_config`).

Compared per owner as sets of the lists' numbers, so that a statement reformatted, moved (to another owner too, from
kernel code as well), written once per branch of an `#if` / `#else`, or whose type names are renamed (same numbers)
is no row; a statement holding an instance list is native_instances.py's; lists of 0, 1, true and false alone
(`range<0>`, `get<1>`) are no config; a kernel's own code (`__global__` / `__device__` functions) is its body, no
row."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.native_instances import is_list_entry
from bisector.analysis.native_scope import CLASS_HEAD, enclosing_function, enclosing_heads, head_start
from bisector.vocab.gitdiff import Hunk

MAX_STATEMENT_LINES = 80  # a statement spread over this many lines at most (one template argument a line)

_LITERAL = re.compile(r"(?<![\w.])(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?)[uUlLfF]*|\btrue\b|\bfalse\b")
_OPEN = re.compile(r"[A-Za-z_]\w*\s*<(?![<=])")  # a name and `<` (not `<=`): a template's argument list may open
_NOT_TEMPLATES = frozenset({"template", "operator", "if", "while", "return", "for"})
_AGGREGATE_HEAD = re.compile(r"^\s*(?:template\s*<[^{;]*?>\s*)?(?:struct|class)\s+(?:alignas\s*\([^)]*\)\s*)?(\w+)")
_ALIAS = re.compile(r"^\s*(?:template\s*<[^;]*?>\s*)?using\s+(\w+)\s*=|^\s*typedef\b.*?\b(\w+)\s*;\s*$")
_CONFIG_ALIAS = re.compile(r"(?i)config|traits|policy|params|tuning")
_TEMPLATE_NAME = re.compile(r"([A-Za-z_]\w*)\s*<(?![<=])")
_NOT_CONFIG = frozenset({"0", "1", "true", "false"})
_SUFFIX = re.compile(r"[uUlLfF]+$")

Unit = tuple[FindingKind, str]  # the row's kind and name
_ALIAS_KEY = " picks "  # in the compared key of a config alias: `config picks [templates]`


def template_argument_rows(
    path: str, old_lines: list[str], new_lines: list[str], hunks: Iterable[Hunk]
) -> list[Finding]:
    """One row per owner whose template-argument numbers (or config templates) the hunks change."""
    hunks = list(hunks)
    texts: dict[str, str] = {}
    everywhere: list[set[str]] = [set(), set()]  # what each side's touched statements compare, kernel code too
    ranges = [[(h.old_lo - 1, h.old_hi + 1) for h in hunks], [(h.new_lo - 1, h.new_hi + 1) for h in hunks]]
    sides = [_units(lines, ranges[side], texts, everywhere[side]) for side, lines in enumerate((old_lines, new_lines))]
    rows: list[Finding] = []
    for unit in dict.fromkeys([*sides[0], *sides[1]]):
        old, new = sides[0].get(unit, Counter()), sides[1].get(unit, Counter())
        if not (set(old) - everywhere[1]) and not (set(new) - everywhere[0]):
            continue  # the same numbers (one entry written twice under #if / #else, or moved to another owner)
        if not _in_both(unit, old_lines, new_lines):
            continue  # a function or alias the commit adds or removes whole
        before, after = next(iter(old - new), None), next(iter(new - old), None)
        if _ALIAS_KEY in (before or after or ""):
            detail = "a config alias picks another config template"
        else:
            detail = "numbers passed as template arguments (a config written as a type)"
        rows.append(
            Finding(
                unit[0],
                path,
                unit[1],
                key="template arguments",
                before=short_text(texts[before]) if before else None,
                after=short_text(texts[after]) if after else None,
                detail=detail,
            )
        )
    return rows


def _units(
    lines: list[str], ranges: list[tuple[int, int]], texts: dict[str, str], everywhere: set[str]
) -> dict[Unit, Counter[str]]:
    """Per owner: the multiset of what is compared (the numbers of each argument list, or the templates a config
    alias names) over the statements the ranges touch (with the unchanged line on each side: a line inserted into a
    statement leaves it touched on both sides); texts keeps a statement's text per compared key, everywhere what
    any statement compares, kernel code's too."""
    seen: set[int] = set()
    units: dict[Unit, Counter[str]] = {}
    for lo, hi in ranges:
        for index in range(max(lo, 0), min(hi, len(lines))):
            start, end = _statement(lines, index)
            if start in seen or lines[start].lstrip().startswith("#"):
                continue
            seen.add(start)
            if any(is_list_entry(lines, at) for at in range(start, end + 1)):
                continue  # a statement holding an instance list: native_instances.py's rows
            text = " ".join(" ".join(lines[start : end + 1]).split())
            for unit, compared in _compared(lines, start, text):
                everywhere.add(compared)
                if unit[1]:
                    units.setdefault(unit, Counter())[compared] += 1
                    texts.setdefault(compared, text)
    return units


def _compared(lines: list[str], start: int, text: str) -> list[tuple[Unit, str]]:
    numbers = [signature for signature in _argument_lists(text) if signature]
    alias = _ALIAS.match(text)
    config_alias = alias is not None and _CONFIG_ALIAS.search(alias[1] or alias[2] or "") is not None
    if not numbers and not config_alias:
        return []
    owner = _owner(lines, start, text, alias)
    if owner is None:
        return []
    found: list[tuple[Unit, str]] = []
    if numbers:
        found.append((owner, repr(numbers)))
    if config_alias and alias is not None and owner[0] is FindingKind.DISPATCH_LOGIC:
        templates = sorted(name for name in _TEMPLATE_NAME.findall(text[alias.end() :]) if name not in _NOT_TEMPLATES)
        found.append((owner, f"{alias[1] or alias[2]}{_ALIAS_KEY}{templates}"))
    return found


def _owner(lines: list[str], start: int, text: str, alias: re.Match[str] | None) -> Unit | None:
    """The specialised template (a struct head), the host function, the class, or the alias at file scope."""
    aggregate = _AGGREGATE_HEAD.match(text)
    if aggregate is not None:
        return FindingKind.CONSTANT, aggregate[1]
    scope = enclosing_function(lines, start)
    if scope is not None:
        return FindingKind.DISPATCH_LOGIC, "" if scope.device else scope.function  # kernel code: compared only
    for head in enclosing_heads(lines, start):
        holder = CLASS_HEAD.search(head)
        if holder is not None:
            return FindingKind.CONSTANT, holder[1]
    if alias is not None:
        return FindingKind.CONSTANT, alias[1] or alias[2]
    return None


def _statement(lines: list[str], index: int) -> tuple[int, int]:
    """The lines of the statement (or declaration head) that holds line index: back to the previous `;`, `{` or
    `}` at a line's end, on to the next."""
    start = head_start(lines, index, MAX_STATEMENT_LINES + 1)
    end = index
    while end < len(lines) - 1 and end - index < MAX_STATEMENT_LINES:
        if lines[end].rstrip().endswith((";", "{", "}")) or lines[end].lstrip().startswith("#"):
            break
        end += 1
    return start, end


def _argument_lists(text: str) -> list[tuple[str, ...]]:
    """The literals of each outermost template argument list of the statement (empty for lists of types alone)."""
    found: list[tuple[str, ...]] = []
    position = 0
    while (opening := _OPEN.search(text, position)) is not None:
        name = opening[0].rstrip("<").strip()
        if name in _NOT_TEMPLATES:
            position = opening.end()
            continue
        end = _list_end(text, opening.end())
        if end is None:
            position = opening.end()
            continue
        literals = tuple(_SUFFIX.sub("", literal.lower()) for literal in _LITERAL.findall(text[opening.end() : end]))
        if any(literal not in _NOT_CONFIG for literal in literals):  # not `range<0>`, `get<1>`
            found.append(literals)
        position = end + 1
    return found


def _list_end(text: str, start: int) -> int | None:
    """The index of the `>` that closes the list opened just before start, or None (a comparison, no list)."""
    depth, parens = 1, 0
    index = start
    while index < len(text):
        char = text[index]
        if char in "({[":
            parens += 1
        elif char in ")}]":
            parens -= 1
            if parens < 0:
                return None
        elif char == ";" or (char == "{" and parens == 0):
            return None
        elif parens == 0 and char == "<":
            if re.search(r"[\w:]\s*$", text[max(start, index - 40) : index]) is None:
                return None  # a comparison at the list's own level: no template list
            depth += 1
        elif parens == 0 and char == ">":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


def _in_both(unit: Unit, old_lines: list[str], new_lines: list[str]) -> bool:
    """Whether both versions name the owner: a function by its last `::` part and `(`; a class or template by its
    name (a specialisation added to a template both versions have is a new entry of its table)."""
    name = re.escape(unit[1].split("::")[-1])
    pattern = re.compile(rf"\b{name}\s*\(" if unit[0] is not FindingKind.CONSTANT else rf"\b{name}\b")
    return any(pattern.search(line) for line in old_lines) and any(pattern.search(line) for line in new_lines)
