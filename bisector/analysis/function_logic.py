"""The functions of a module that read its tables or constants, and the rows for those whose reading code changed.

A function is cut into pieces: each simple statement, and the header of each compound statement (the test of an
if, the iterable of a for, the items of a with), with markers where a block starts and ends. A commit changes a
function's dispatch logic when a piece it adds or removes reads a module or class table or constant; a change
elsewhere in the function (a log line, a new argument of an unrelated call) is not one. Decorators compared
entry by entry (triton.autotune, triton.heuristics) are not pieces. Fields of a dataclass-like class read
through self are the instance's values, not the class's constants. None checks (`x is not None and x >= (12, 3)`
against `x >= (12, 3)`, an added `if x is None: raise ...`) read nothing: a guard against a missing value changes
no choice made when the value is there.
"""

from __future__ import annotations

import ast
import copy
import difflib
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

from bisector.analysis.code_shape import first_line
from bisector.analysis.conditions import none_check
from bisector.analysis.findings import Finding, FindingKind

ENTRY_DECORATORS = ("autotune", "heuristics")  # decorators whose arguments are entries of their own
_WORD = re.compile(r"\w+")
_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")
_RECORD_BASES = ("NamedTuple", "BaseModel", "TypedDict")


@dataclass(frozen=True)
class Piece:
    dump: str  # ast.dump of the statement or header: equal dumps mean the same code
    nodes: tuple[ast.AST, ...] = ()  # its code, read for the names it loads when it is added or removed (_reads)


@dataclass(frozen=True)
class FunctionInfo:
    name: str  # qualified: "threshold_for", "Dispatcher.pick"
    text: str  # its source, decorators included, without comments (code_text): equal texts need no closer look
    node: ast.FunctionDef | ast.AsyncFunctionDef
    class_name: str  # resolves self.X / cls.X reads
    fields: frozenset[str]  # of a dataclass-like class: self.X reads of these are no constants
    first_line: int
    last_line: int

    lines: list[str] = field(default_factory=list, compare=False, repr=False)  # the module's source lines

    @cached_property
    def body(self) -> list[ast.stmt]:
        """The function's statements, its docstring left out."""
        body = self.node.body
        first = body[0] if body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            return body[1:]
        return body

    @cached_property
    def heads(self) -> tuple[Piece, ...]:
        """The pieces of the signature: arguments, decorators (but entry decorators), return annotation."""
        function = self.node
        heads: list[ast.AST] = [function.args]
        heads += [d for d in function.decorator_list if not _entry_decorator(d)]
        if function.returns is not None:
            heads.append(function.returns)
        return tuple(_piece([head]) for head in heads)

    def statement_source(self, statement: ast.stmt) -> list[str]:
        """The source lines of one of the function's statements (a nested def's decorators included)."""
        return self.lines[first_line(statement) - 1 : statement.end_lineno or statement.lineno]


def function_info(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    name: str,
    class_name: str,
    fields: frozenset[str],
    lines: list[str],
) -> FunctionInfo:
    """One function of a module whose source lines are lines."""
    start = first_line(function)
    end = function.end_lineno or function.lineno
    text = code_text(lines[start - 1 : end])
    return FunctionInfo(name, text, function, class_name, fields, function.lineno, end, lines)


# A Python comment: a whole line ("# note"; not "#define" in a string of C source), or "  # note" after code when
# neither the code's last character nor the note is a quote. Comments change nothing a scan reads.
_COMMENT = re.compile(r"^\s*#(?:\s.*)?$|(?<=[^'\"#\s])\s+#\s[^'\"]*$")


def code_text(lines: list[str]) -> str:
    """Source lines without comments and blank lines: equal code texts scan the same."""
    code = ((_COMMENT.sub("", line) if "#" in line else line).rstrip() for line in lines)
    return "\n".join(line for line in code if line)


def record_fields(cls: ast.ClassDef) -> frozenset[str]:
    """The annotated names of a dataclass-like class (@dataclass, NamedTuple, BaseModel, TypedDict): per-instance
    fields whose class-level values are only defaults."""
    decorators = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in cls.decorator_list]
    record = any(d.rsplit(".", 1)[-1] == "dataclass" for d in decorators)
    record = record or any(ast.unparse(base).rsplit(".", 1)[-1] in _RECORD_BASES for base in cls.bases)
    if not record:
        return frozenset()
    return frozenset(s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))


def dispatch_logic_rows(
    path: str, old: dict[str, FunctionInfo], new: dict[str, FunctionInfo], names: set[str]
) -> list[Finding]:
    """One row per function whose added or removed pieces read one of names (tables and constants)."""
    rows: list[Finding] = []
    words = {name.rsplit(".", 1)[-1] for name in names}  # a read of a name has its last part in the source
    for name in [*old, *(n for n in new if n not in old)]:
        was, now = old.get(name), new.get(name)
        if (was is None or now is None or was.text != now.text) and not any(
            info is not None and not words.isdisjoint(_WORD.findall(info.text)) for info in (was, now)
        ):
            continue  # neither version names a table or constant: no read of one changed
        reads = sorted(_changed_reads(was, now) & names)
        if not reads:
            continue
        rows.append(
            Finding(
                kind=FindingKind.DISPATCH_LOGIC,
                file=path,
                name=name,
                before=_span(was),
                after=_span(now),
                line=now.first_line if now else was.first_line if was else None,
                detail="reads " + ", ".join(reads),
            )
        )
    return rows


def _changed_reads(was: FunctionInfo | None, now: FunctionInfo | None) -> set[str]:
    if was is not None and now is not None and was.text == now.text:
        return set()
    old, new = _changed_pieces(was, now)
    matcher = difflib.SequenceMatcher(a=[p.dump for p in old], b=[p.dump for p in new], autojunk=False)
    removed: list[Piece] = []
    added: list[Piece] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            removed += old[i1:i2]
            added += new[j1:j2]
    if removed and added:
        removed, added = _unguarded(removed, added)
    reads: set[str] = set()
    for info, pieces in ((was, removed), (now, added)):
        for piece in pieces:
            assert info is not None  # a function absent on one side has no pieces there
            reads.update(name for node in piece.nodes for name in _reads(node, info.class_name, info.fields))
    return reads


def _changed_pieces(was: FunctionInfo | None, now: FunctionInfo | None) -> tuple[list[Piece], list[Piece]]:
    """Both versions cut into pieces, less the statements at the body's start and end whose source lines the two
    share (a long function's one-line change need not cut and compare the thousands of statements around it)."""
    old_body, new_body = (was.body if was else []), (now.body if now else [])
    start, end = 0, 0
    if was is not None and now is not None:
        limit = min(len(old_body), len(new_body))
        while start < limit and _same_source(was, old_body[start], now, new_body[start]):
            start += 1
        while end < limit - start and _same_source(was, old_body[-1 - end], now, new_body[-1 - end]):
            end += 1
    old = [*(was.heads if was else ()), *_block_pieces(old_body[start : len(old_body) - end])]
    new = [*(now.heads if now else ()), *_block_pieces(new_body[start : len(new_body) - end])]
    return old, new


def _same_source(was: FunctionInfo, old: ast.stmt, now: FunctionInfo, new: ast.stmt) -> bool:
    return was.statement_source(old) == now.statement_source(new)


def _unguarded(removed: list[Piece], added: list[Piece]) -> tuple[list[Piece], list[Piece]]:
    """The changed pieces less those that one on the other side equals once both lose their None checks."""
    old_cores = [_core_dump(piece) for piece in removed]
    new_cores = [_core_dump(piece) for piece in added]
    shared = Counter(old_cores) & Counter(new_cores)
    return _unshared(removed, old_cores, shared.copy()), _unshared(added, new_cores, shared)


def _unshared(pieces: list[Piece], cores: list[str], shared: Counter[str]) -> list[Piece]:
    kept: list[Piece] = []
    for piece, core in zip(pieces, cores, strict=True):
        if shared[core] > 0:
            shared[core] -= 1
        else:
            kept.append(piece)
    return kept


def _core_dump(piece: Piece) -> str:
    """A piece's dump with the None checks taken out of its and / or operands."""
    dump = piece.dump
    for node in piece.nodes:
        if any(isinstance(n, ast.BoolOp) and any(map(none_check, n.values)) for n in ast.walk(node)):
            dump = dump.replace(ast.dump(node), ast.dump(_NoneChecksRemoved().visit(copy.deepcopy(node))))
    return dump


class _NoneChecksRemoved(ast.NodeTransformer):
    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        self.generic_visit(node)
        kept = [value for value in node.values if not none_check(value)]
        if not kept or len(kept) == len(node.values):
            return node
        return kept[0] if len(kept) == 1 else ast.BoolOp(node.op, kept)


def _span(info: FunctionInfo | None) -> str | None:
    return None if info is None else f"lines {info.first_line}-{info.last_line}"


def _entry_decorator(decorator: ast.expr) -> bool:
    """triton.autotune, triton.heuristics, and wrappers named after them (fla_cache_autotune)."""
    return isinstance(decorator, ast.Call) and ast.unparse(decorator.func).rsplit(".", 1)[-1].endswith(ENTRY_DECORATORS)


def _block_pieces(statements: Iterable[ast.AST]) -> Iterator[Piece]:
    for statement in statements:
        blocks = [(f, getattr(statement, f)) for f in _BLOCK_FIELDS if getattr(statement, f, None)]
        if not blocks:
            yield _piece([statement])
            continue
        head: list[object] = [v for f, v in ast.iter_fields(statement) if f not in _BLOCK_FIELDS]
        yield _piece(head, kind=type(statement).__name__)
        for field_name, block in blocks:
            yield Piece(f"[{field_name}")
            yield from _block_pieces(block)
            yield Piece("]")


def _piece(parts: list[object], kind: str = "") -> Piece:
    items = [n for part in parts for n in (part if isinstance(part, list) else [part])]
    nodes = [n for n in items if isinstance(n, ast.AST)]
    dump = kind + "\n".join(ast.dump(n) if isinstance(n, ast.AST) else repr(n) for n in items)
    return Piece(dump, tuple(nodes))


def _reads(node: ast.AST, class_name: str, fields: frozenset[str]) -> Iterator[str]:
    """The names a piece loads, except inside f-strings (a constant formatted into a message chooses nothing) and
    None checks."""
    stack = [node]
    while stack:
        child = stack.pop()
        if isinstance(child, ast.JoinedStr) or none_check(child):
            continue
        stack.extend(ast.iter_child_nodes(child))
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
            yield child.id
        elif isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
            owner = child.value.id
            if owner in ("self", "cls") and class_name:
                if child.attr not in fields:
                    yield f"{class_name}.{child.attr}"
            else:
                yield f"{owner}.{child.attr}"
