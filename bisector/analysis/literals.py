"""Literal evaluation of Python expressions with ast: nothing is imported or executed.

Names of other literal constants are resolved from an environment, simple arithmetic is folded (numbers of at most
MAX_BITS bits), lists of triton.Config become mappings keyed by their meta-parameters; anything else becomes a Symbol
compared by its source text.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Hashable
from typing import Any

from bisector.analysis.values import Leaf, Mapping, Node, Symbol, render, sequence

_WRAPPERS = frozenset({"dict", "list", "tuple", "set", "frozenset", "MappingProxyType", "types.MappingProxyType"})
_VERSION_PARSERS = frozenset(
    {"version.parse", "packaging.version.parse", "Version", "version.Version", "packaging.version.Version",
     "parse_version", "pkg_resources.parse_version", "LooseVersion", "StrictVersion"}
)  # fmt: skip
SCALARS = (int, float, complex, str, bytes, bool, type(None))
MAX_BITS = 4096
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


def wrapped_literal(expr: ast.expr) -> ast.expr | None:
    """The literal inside dict({...}), frozenset({...}), MappingProxyType({...}) and the like."""
    if not isinstance(expr, ast.Call) or expr.keywords or len(expr.args) != 1:
        return None
    if ast.unparse(expr.func) in _WRAPPERS and isinstance(expr.args[0], ast.Dict | ast.List | ast.Tuple | ast.Set):
        return expr.args[0]
    return None


def version_literal(expr: ast.expr) -> ast.expr | None:
    """The version string of version.parse("3.2.0"), Version("3.2.0") and the like: a version threshold is the
    string it parses (VERSION_320 = version.parse("3.2.0") is a constant "3.2.0")."""
    if not isinstance(expr, ast.Call) or expr.keywords or len(expr.args) != 1:
        return None
    argument = expr.args[0]
    is_text = isinstance(argument, ast.Constant) and isinstance(argument.value, str)
    return argument if is_text and ast.unparse(expr.func) in _VERSION_PARSERS else None


def plain_value(node: Node) -> Node:
    """The value as another name sees it: a scalar's text is its repr, whatever expression made it."""
    if isinstance(node, Leaf) and isinstance(node.value, SCALARS):
        return Leaf(node.value, repr(node.value), node.line)
    return node


def _has_names(expr: ast.expr) -> bool:
    return any(isinstance(node, ast.Name | ast.Attribute) for node in ast.walk(expr))


class LiteralEvaluator:
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
                if isinstance(expr.op, ast.Add) and (_is_configs(left) or _is_configs(right)):
                    return _joined_configs(left, right, line)
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
        inner = wrapped_literal(expr) or version_literal(expr)
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


def _is_configs(node: Node) -> bool:
    return isinstance(node, Mapping) and node.tag == CONFIG_TAG


def _joined_configs(left: Node, right: Node, line: int) -> Mapping:
    """CONFIGS = [triton.Config(...), ...] + more_configs(): the literal configs keyed as in a plain list, and
    each part that is not a literal list of configs as one entry of its own (compared by its text)."""
    result = Mapping(line=line, tag=CONFIG_TAG)
    for part in (left, right):
        if isinstance(part, Mapping) and part.tag == CONFIG_TAG:
            items = list(part.entries.items())
        else:
            text = render(part)
            items = [(Symbol(text), (f"+ {text}", part))]
        for identity, entry in items:
            unique, count = identity, 1
            while unique in result.entries:
                count += 1
                unique = (identity, count)
            result.entries[unique] = entry
    return result


def _is_triton_config(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and ast.unparse(expr.func) in ("triton.Config", "Config")


def _binary(op: ast.operator, left: object, right: object) -> object:
    numeric = (int, float, complex)
    if isinstance(left, str | bytes) and isinstance(op, ast.Add) and type(left) is type(right):
        return _BINARY[ast.Add](left, right)
    if not (isinstance(left, numeric) and isinstance(right, numeric)):
        raise TypeError("only numbers are folded")
    if isinstance(op, ast.Pow | ast.LShift) and isinstance(right, int) and abs(right) > MAX_BITS:
        raise ValueError("too large")
    result = _BINARY[type(op)](left, right)
    if isinstance(result, int) and result.bit_length() > MAX_BITS:
        raise ValueError("too large")
    return result


def _symbol(expr: ast.expr) -> Leaf:
    text = ast.unparse(expr)
    return Leaf(Symbol(text), text, getattr(expr, "lineno", None))


def member_of_annotated_type(statement: ast.Assign | ast.AnnAssign) -> bool:
    """`mode: Semantics = Semantics.Lane`: a setting's default naming one member of its enum type is a choice made
    in the source, as a literal default is."""
    if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.value, ast.Attribute):
        return False
    owner, annotation = (ast.unparse(e).rsplit(".", 1)[-1] for e in (statement.value.value, statement.annotation))
    return isinstance(statement.annotation, ast.Name | ast.Attribute) and owner == annotation


def add_updated_entries(call: ast.expr, env: dict[str, Node]) -> None:
    """`TABLE.update({...})` after the table's literal (under a version test or not): the entries it adds are the
    table's rows, as the literal's own are."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "update"):
        return
    table = env.get(ast.unparse(call.func.value))
    added = LiteralEvaluator(env).eval(call.args[0]) if len(call.args) == 1 and not call.keywords else None
    if isinstance(table, Mapping) and isinstance(added, Mapping):
        table.entries.update(added.entries)
        table.__dict__.pop("canonical", None)
