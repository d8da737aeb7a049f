"""Literal tables, constants, Triton autotune configs and heuristics of one Python module, read with ast.

Nothing is imported or executed: module- and class-level assignments are evaluated when they are literals
(names of other literal constants resolved, simple arithmetic folded); anything else becomes a Symbol compared
by its source text. diff_python compares two scans of one file.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from bisector.analysis.dispatch_sites import SiteScan, diff_sites, scan_sites
from bisector.analysis.env_gates import EnvGates, diff_env_gates, scan_env_gates
from bisector.analysis.file_roles import is_test_path
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.values import Leaf, Mapping, Node, Symbol, diff_entries, render, sequence

_WRAPPERS = frozenset({"dict", "list", "tuple", "set", "frozenset", "MappingProxyType", "types.MappingProxyType"})
_SCALARS = (int, float, complex, str, bytes, bool, type(None))
_MAX_BITS = 4096
_BINARY: dict[type[ast.operator], Callable[[object, object], object]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.BitXor: operator.xor,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], object]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
    ast.Not: operator.not_,
}
CONFIG_TAG = "triton.Config"


@dataclass(frozen=True)
class FunctionInfo:
    name: str  # qualified: "threshold_for", "Dispatcher.pick"
    dump: str  # ast.dump without the docstring: equal dumps mean the same logic
    reads: frozenset[str]  # module / class names it loads ("_TUNED_MMA_MIN_M", "Dispatcher.TABLE")
    first_line: int
    last_line: int


@dataclass(frozen=True)
class PythonScan:
    entries: dict[str, tuple[FindingKind, Node]]  # "_TABLE", "Cls.TABLE", "kernel@triton.autotune" -> tree
    functions: dict[str, FunctionInfo]
    sites: SiteScan = field(default_factory=SiteScan)  # launch sites and branch conditions in functions
    env_gates: EnvGates = field(default_factory=dict)


def scan_python(source: str | bytes) -> PythonScan:
    """Scan a module's source; raises SyntaxError (or ValueError for null bytes) when it does not parse."""
    tree = ast.parse(source)
    scanner = _Scanner()
    scanner.scan_body(tree.body, prefix="", env={})
    return PythonScan(scanner.entries, scanner.functions, scan_sites(tree), scan_env_gates(tree))


def diff_python(path: str, before: PythonScan | None, after: PythonScan | None) -> list[Finding]:
    """Keyed rows for every table entry, constant, autotune config or heuristic that differs; outside tests, the
    launch arguments, dispatch conditions and env gates that differ; then the functions that read a table or
    constant and whose code changed ("dispatch logic changed"), unless a launch or condition row already names
    the function more precisely."""
    old = before.entries if before else {}
    new = after.entries if after else {}
    findings = diff_entries(path, old, new)
    logic = _dispatch_logic(path, before, after, set(old) | set(new))
    if is_test_path(path):  # a test's own conditions and env reads choose nothing in the library
        return findings + logic
    sites = diff_sites(path, before.sites if before else None, after.sites if after else None)
    named = {f.name for f in sites if f.kind is FindingKind.BRANCH_CONDITION}
    named |= {f.detail.removeprefix("in ").split(";")[0] for f in sites if f.kind is FindingKind.LAUNCH_PARAM}
    findings.extend(sites)
    findings.extend(diff_env_gates(path, before.env_gates if before else None, after.env_gates if after else None))
    return findings + [f for f in logic if f.name not in named]


def _dispatch_logic(path: str, before: PythonScan | None, after: PythonScan | None, names: set[str]) -> list[Finding]:
    old = before.functions if before else {}
    new = after.functions if after else {}
    rows: list[Finding] = []
    for name in [*old, *(n for n in new if n not in old)]:
        was, now = old.get(name), new.get(name)
        if was is not None and now is not None and was.dump == now.dump:
            continue
        reads = sorted(((was.reads if was else frozenset()) | (now.reads if now else frozenset())) & names)
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


def _span(info: FunctionInfo | None) -> str | None:
    return None if info is None else f"lines {info.first_line}-{info.last_line}"


class _Scanner:
    def __init__(self) -> None:
        self.entries: dict[str, tuple[FindingKind, Node]] = {}
        self.functions: dict[str, FunctionInfo] = {}

    def scan_body(self, body: list[ast.stmt], prefix: str, env: dict[str, Node]) -> None:
        for statement in body:
            if isinstance(statement, ast.Assign | ast.AnnAssign):
                self._assignment(statement, prefix, env)
            elif isinstance(statement, ast.ClassDef) and not _is_enum(statement):
                class_env = dict(env)
                self.scan_body(statement.body, f"{prefix}{statement.name}.", class_env)
                for name, node in class_env.items():
                    if env.get(name) is not node:
                        env[f"{statement.name}.{name}"] = node
            elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                self._function(statement, prefix, env)
            elif isinstance(statement, ast.If | ast.Try | ast.With):
                self._definitions_in(statement, prefix, env)

    def _definitions_in(self, statement: ast.stmt, prefix: str, env: dict[str, Node]) -> None:
        """Everything under a module-level if / try / with (`if HAS_TRITON: CONFIGS = [...]; @triton.autotune ...`).
        A table an if binds in both branches is kept once per branch: "CONFIGS (if is_hip())", "CONFIGS (else)"."""
        if isinstance(statement, ast.If):
            self._branches(statement, prefix, env)
            return
        blocks: list[list[ast.stmt]] = []
        for field_name in ("body", "orelse", "finalbody"):
            blocks.append(getattr(statement, field_name, []))
        blocks.extend(handler.body for handler in getattr(statement, "handlers", []))
        for block in blocks:
            self.scan_body(block, prefix, env)

    def _branches(self, statement: ast.If, prefix: str, env: dict[str, Node]) -> None:
        both = _bound(statement.body, prefix) & _bound(statement.orelse, prefix)
        test = ast.unparse(statement.test)
        for block, label in ((statement.body, f"if {test}"), (statement.orelse, "else")):
            self.scan_body(block, prefix, env)
            for name in both & set(self.entries):
                self.entries[f"{name} ({label})"] = self.entries.pop(name)

    def _assignment(self, statement: ast.Assign | ast.AnnAssign, prefix: str, env: dict[str, Node]) -> None:
        if statement.value is None:
            return
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        evaluator = _Evaluator(env)
        for target in targets:
            if isinstance(target, ast.Name):
                self._bind(prefix, target.id, statement.value, evaluator.eval(statement.value), env)
            elif isinstance(target, ast.Tuple) and isinstance(statement.value, ast.Tuple | ast.List):
                if len(target.elts) == len(statement.value.elts):
                    for element, value in zip(target.elts, statement.value.elts, strict=True):
                        if isinstance(element, ast.Name):
                            self._bind(prefix, element.id, value, evaluator.eval(value), env)
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                self._set_item(prefix, target, evaluator, statement.value, env)

    def _bind(self, prefix: str, name: str, source: ast.expr, node: Node, env: dict[str, Node]) -> None:
        env[name] = _plain(node)
        if name.startswith("__") and name.endswith("__"):
            return
        kind = _kind_of(source, node)
        if kind is not None:
            self.entries[prefix + name] = (kind, node)
        else:
            self.entries.pop(prefix + name, None)

    def _set_item(
        self, prefix: str, target: ast.Subscript, evaluator: _Evaluator, value: ast.expr, env: dict[str, Node]
    ) -> None:
        """`TABLE[(1, 2)] = 3` after the table's literal: the row belongs to the table."""
        assert isinstance(target.value, ast.Name)
        table = env.get(target.value.id)
        if not isinstance(table, Mapping):
            return
        key = evaluator.eval(target.slice)
        if not isinstance(key, Leaf):
            return
        table.entries[key.value] = (ast.unparse(target.slice), evaluator.eval(value))
        table.__dict__.pop("canonical", None)

    def _function(self, function: ast.FunctionDef | ast.AsyncFunctionDef, prefix: str, env: dict[str, Node]) -> None:
        name = prefix + function.name
        evaluator = _Evaluator(env)
        for decorator in function.decorator_list:
            if not isinstance(decorator, ast.Call):
                continue
            called = ast.unparse(decorator.func)
            if called.rsplit(".", 1)[-1] == "autotune":
                self.entries[f"{name}@{called}"] = (FindingKind.AUTOTUNE_CONFIG, _autotune(decorator, evaluator))
            elif called.rsplit(".", 1)[-1] == "heuristics" and decorator.args:
                self.entries[f"{name}@{called}"] = (FindingKind.HEURISTIC, evaluator.eval(decorator.args[0]))
        class_name = prefix.rstrip(".")
        self.functions[name] = FunctionInfo(
            name=name,
            dump=_dump_without_docstring(function),
            reads=frozenset(_reads(function, class_name)),
            first_line=function.lineno,
            last_line=function.end_lineno or function.lineno,
        )


def _bound(body: list[ast.stmt], prefix: str) -> set[str]:
    """The names a block's own assignments bind (what an else branch may bind again)."""
    names: set[str] = set()
    for statement in body:
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        names.update(prefix + t.id for t in targets if isinstance(t, ast.Name))
    return names


def _is_enum(cls: ast.ClassDef) -> bool:
    """Enum members are names for kernels and reasons, not tuning values."""
    return any(ast.unparse(base).rsplit(".", 1)[-1].endswith(("Enum", "Flag")) for base in cls.bases)


def _kind_of(source: ast.expr, node: Node) -> FindingKind | None:
    if isinstance(node, Mapping) and node.tag == CONFIG_TAG:
        return FindingKind.AUTOTUNE_CONFIG
    if isinstance(source, ast.Dict | ast.List | ast.Tuple | ast.Set) or _wrapped_literal(source) is not None:
        return FindingKind.TABLE_ENTRY
    if isinstance(node, Leaf) and isinstance(node.value, _SCALARS):
        return FindingKind.CONSTANT
    return None


def _autotune(decorator: ast.Call, evaluator: _Evaluator) -> Mapping:
    """configs (keyed by their meta-parameters), key and the other arguments of one triton.autotune."""
    arguments: list[tuple[str, ast.expr]] = list(zip(("configs", "key"), decorator.args, strict=False))
    arguments += [(kw.arg, kw.value) for kw in decorator.keywords if kw.arg is not None]
    result = Mapping(line=decorator.lineno)
    for name, expr in arguments:
        result.entries[name] = (name, evaluator.eval(expr))
    return result


def _dump_without_docstring(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    body = function.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]
    parts: list[ast.AST] = [function.args, *function.decorator_list, *body]
    if function.returns is not None:
        parts.append(function.returns)
    return "\n".join(ast.dump(part) for part in parts)


def _reads(function: ast.AST, class_name: str) -> Iterable[str]:
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            yield node.id
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = node.value.id
            yield f"{class_name}.{node.attr}" if owner in ("self", "cls") and class_name else f"{owner}.{node.attr}"


def _wrapped_literal(expr: ast.expr) -> ast.expr | None:
    """The literal inside dict({...}), frozenset({...}), MappingProxyType({...}) and the like."""
    if not isinstance(expr, ast.Call) or expr.keywords or len(expr.args) != 1:
        return None
    if ast.unparse(expr.func) in _WRAPPERS and isinstance(expr.args[0], ast.Dict | ast.List | ast.Tuple | ast.Set):
        return expr.args[0]
    return None


def _plain(node: Node) -> Node:
    """The value as another name sees it: a scalar's text is its repr, whatever expression made it."""
    if isinstance(node, Leaf) and isinstance(node.value, _SCALARS):
        return Leaf(node.value, repr(node.value), node.line)
    return node


def _has_names(expr: ast.expr) -> bool:
    return any(isinstance(node, ast.Name | ast.Attribute) for node in ast.walk(expr))


class _Evaluator:
    """Literal evaluation with names resolved from env; whatever is not literal becomes a Symbol."""

    def __init__(self, env: dict[str, Node]) -> None:
        self.env = env

    def eval(self, expr: ast.expr) -> Node:
        line = expr.lineno
        if isinstance(expr, ast.Constant):
            return Leaf(expr.value, repr(expr.value), line)
        if isinstance(expr, ast.Name | ast.Attribute):
            return self._name(expr, line)
        if isinstance(expr, ast.UnaryOp | ast.BinOp):
            return self._arithmetic(expr, line)
        if isinstance(expr, ast.Dict):
            return self._dict(expr)
        if isinstance(expr, ast.List | ast.Tuple | ast.Set):
            return self._sequence(expr)
        if isinstance(expr, ast.Call):
            return self._call(expr, line)
        return _symbol(expr)

    def _name(self, expr: ast.Name | ast.Attribute, line: int) -> Node:
        name = ast.unparse(expr)
        value = self.env.get(name)
        if value is None:
            return _symbol(expr)
        if isinstance(value, Leaf):
            return Leaf(value.value, f"{name} ({value.text})", line)
        return value

    def _arithmetic(self, expr: ast.UnaryOp | ast.BinOp, line: int) -> Node:
        try:
            if isinstance(expr, ast.UnaryOp):
                operand = self.eval(expr.operand)
                if not isinstance(operand, Leaf) or isinstance(operand.value, Symbol):
                    return _symbol(expr)
                result = _UNARY[type(expr.op)](operand.value)
            else:
                left, right = self.eval(expr.left), self.eval(expr.right)
                if not (isinstance(left, Leaf) and isinstance(right, Leaf)):
                    return _symbol(expr)
                result = _binary(expr.op, left.value, right.value)
        except (ArithmeticError, TypeError, ValueError, KeyError):
            return _symbol(expr)
        if not isinstance(result, Hashable):
            return _symbol(expr)
        text = f"{ast.unparse(expr)} ({result!r})" if _has_names(expr) or isinstance(expr, ast.BinOp) else repr(result)
        return Leaf(result, text, line)

    def _dict(self, expr: ast.Dict) -> Node:
        result = Mapping(line=expr.lineno)
        for key_expr, value_expr in zip(expr.keys, expr.values, strict=True):
            value = self.eval(value_expr)
            if key_expr is None:  # {**OTHER}
                if isinstance(value, Mapping):
                    result.entries.update(value.entries)
                continue
            key = self.eval(key_expr)
            identity = key.value if isinstance(key, Leaf) else Symbol(ast.unparse(key_expr))
            result.entries[identity] = (ast.unparse(key_expr), value)
        return result

    def _sequence(self, expr: ast.List | ast.Tuple | ast.Set) -> Node:
        if expr.elts and all(_is_triton_config(e) for e in expr.elts):
            return self._configs([e for e in expr.elts if isinstance(e, ast.Call)], expr.lineno)
        items = [self.eval(e) for e in expr.elts]
        brackets = "()" if isinstance(expr, ast.Tuple) else "{}" if isinstance(expr, ast.Set) else "[]"
        return sequence(items, brackets, expr.lineno, unordered=isinstance(expr, ast.Set))

    def _configs(self, calls: list[ast.Call], line: int) -> Mapping:
        """A list of triton.Config keyed by the meta-parameter dict; the value is the other arguments."""
        result = Mapping(line=line, tag=CONFIG_TAG)
        for call in calls:
            meta = self.eval(call.args[0]) if call.args else Mapping()
            rest = [(kw.arg or "**", self.eval(kw.value)) for kw in call.keywords]
            rest += [(f"arg{i}", self.eval(arg)) for i, arg in enumerate(call.args[1:], start=1)]
            text = ", ".join(f"{name}={render(value)}" for name, value in rest) or "(defaults)"
            identity: Hashable = meta.canonical
            key_text = render(meta)
            duplicate = 1
            while identity in result.entries:
                duplicate += 1
                identity, key_text = (meta.canonical, duplicate), f"{render(meta)} #{duplicate}"
            leaf = Leaf(tuple((name, value.canonical) for name, value in rest), text, call.lineno)
            result.entries[identity] = (key_text, leaf)
        return result

    def _call(self, expr: ast.Call, line: int) -> Node:
        inner = _wrapped_literal(expr)
        if inner is not None:
            return self.eval(inner)
        if ast.unparse(expr.func) == "dict" and not expr.args and all(kw.arg for kw in expr.keywords):
            result = Mapping(line=line)
            for kw in expr.keywords:
                assert kw.arg is not None
                result.entries[kw.arg] = (repr(kw.arg), self.eval(kw.value))
            return result
        if _is_triton_config(expr):
            return self._configs([expr], line)
        return _symbol(expr)


def _is_triton_config(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and ast.unparse(expr.func) in ("triton.Config", "Config")


def _binary(op: ast.operator, left: object, right: object) -> object:
    numeric = (int, float, complex)
    if isinstance(left, str | bytes) and isinstance(op, ast.Add) and type(left) is type(right):
        return _BINARY[ast.Add](left, right)
    if not (isinstance(left, numeric) and isinstance(right, numeric)):
        raise TypeError("only numbers are folded")
    if isinstance(op, ast.Pow | ast.LShift) and isinstance(right, int) and abs(right) > _MAX_BITS:
        raise ValueError("too large")
    result = _BINARY[type(op)](left, right)
    if isinstance(result, int) and result.bit_length() > _MAX_BITS:
        raise ValueError("too large")
    return result


def _symbol(expr: ast.expr) -> Leaf:
    text = ast.unparse(expr)
    return Leaf(Symbol(text), text, getattr(expr, "lineno", None))
