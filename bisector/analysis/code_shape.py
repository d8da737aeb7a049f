"""What a piece of Python code does, as text to compare: its AST without positions, its docstring and its type
annotations (`x: int = 4` is `x = 4`; `def f(n: int) -> int` is `def f(n)`), so that comments, layout, docstrings
and annotations are no change; and the walks of the scans that look for calls, conditional expressions,
comprehensions and assignments (walk_inner, loaded_names)."""

from __future__ import annotations

import ast
import copy
from collections import deque
from collections.abc import Iterator
from typing import Protocol

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


class ParsedSource(Protocol):
    """One side of a changed Python module, as the static diff parsed it."""

    @property
    def tree(self) -> ast.Module: ...

    @property
    def lines(self) -> list[str]: ...

    @property
    def numbered(self) -> bool: ...  # lines[n - 1] is the tree's line n


def module_functions(
    body: list[ast.stmt], prefix: str = "", *, under_blocks: bool = False
) -> Iterator[tuple[str, FunctionNode]]:
    """The module's functions and its classes' methods, named `f` and `Class.f`; under_blocks: those defined under a
    module-level if / try / with (`try: import triton`) too."""
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{statement.name}", statement
        elif isinstance(statement, ast.ClassDef) and not prefix:
            yield from module_functions(statement.body, f"{statement.name}.")
        elif under_blocks and not prefix and isinstance(statement, ast.If | ast.Try | ast.With):
            for block in statement_blocks(statement):
                yield from module_functions(block, under_blocks=True)


def positional_parameters(function: FunctionNode) -> list[str]:
    """The names of the parameters a call may pass by position, in order (the positional-only ones first)."""
    return [argument.arg for argument in (*function.args.posonlyargs, *function.args.args)]


def parameter_names(function: FunctionNode) -> list[str]:
    """The positional parameters' names, then the keyword-only ones' (not *args, **kwargs)."""
    return [*positional_parameters(function), *(argument.arg for argument in function.args.kwonlyargs)]


def parameter_defaults(function: FunctionNode) -> list[tuple[str, ast.expr]]:
    """(name, default) of the parameters that have one, the positional ones first."""
    arguments, positional = function.args, positional_parameters(function)
    pairs = list(zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults, strict=True))
    keyword = zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
    return pairs + [(argument.arg, default) for argument, default in keyword if default is not None]


def decorated_as_kernel(function: FunctionNode) -> bool:
    """A Triton kernel by its decorator: @triton.jit (or a bare @jit), @triton.autotune(...), @triton.heuristics(...).
    Not a CuTe DSL @cute.jit or a @jax.jit, whose host functions choose the kernel."""
    return kernel_decorator(function) is not None


def kernel_decorator(function: FunctionNode) -> str | None:
    """The first decorator that makes the function a kernel (decorated_as_kernel), as written: "triton.jit"."""
    names = (ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in function.decorator_list)
    return next((name for name in names if name in _KERNEL_DECORATORS), None)


_KERNEL_DECORATORS = frozenset(
    {"triton.jit", "tl.jit", "jit", "triton.autotune", "autotune", "triton.heuristics", "heuristics"}
)
_OWN_NODES = "_bisect_own_nodes"  # the attribute of a function node that keeps own_nodes' list


def own_nodes(function: FunctionNode) -> list[ast.AST]:
    """The nodes of the function's own code: not those of the functions, lambdas and classes defined in it. Walked
    once per function node and kept on it: several scans of a changed function read them."""
    found: list[ast.AST] | None = getattr(function, _OWN_NODES, None)
    if found is not None:
        return found
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    found = []
    stack: list[ast.AST] = [statement for statement in function.body if not isinstance(statement, nested)]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, nested))
    setattr(function, _OWN_NODES, found)
    return found


def first_line(node: ast.AST) -> int:
    """The node's first line, its decorators' included (a decorated def's lineno is its `def` line)."""
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([getattr(node, "lineno", 1), *(decorator.lineno for decorator in decorators)])


def statement_blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    """The blocks of statements a compound statement holds, in order: body, orelse, finalbody, then each except
    handler's body (a match's cases are not among them)."""
    blocks: list[list[ast.stmt]] = [getattr(node, field, None) or [] for field in ("body", "orelse", "finalbody")]
    blocks.extend(handler.body for handler in getattr(node, "handlers", None) or [])
    return blocks


def module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a module's body and, depth first, those in the blocks of its if / try / with statements."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.Try | ast.With):
            for block in statement_blocks(statement):
                yield from module_statements(block)


def source_lines(module: ParsedSource, node: ast.stmt) -> list[str]:
    """The node's lines of the module's text."""
    return module.lines[node.lineno - 1 : node.end_lineno or node.lineno]


def code_shape(node: ast.AST) -> str:
    """The dump of node with docstrings and annotations removed (node itself is not changed)."""
    return ast.dump(_Unannotated().visit(copy.deepcopy(node)))


def docstring_node(node: ast.AST) -> ast.Expr | None:
    """The docstring statement of a function or class, or None."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) or not node.body:
        return None
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first
    return None


def docstring_lines(node: ast.AST) -> range:
    """The lines of a function's or class's docstring (a docstring that changes changes no dispatch)."""
    docstring = docstring_node(node)
    return range(docstring.lineno, (docstring.end_lineno or docstring.lineno) + 1) if docstring else range(0)


class _Unannotated(ast.NodeTransformer):
    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self._function(node)

    def _function(self, node: FunctionNode) -> ast.AST:
        if docstring_node(node) is not None and len(node.body) > 1:
            node.body = node.body[1:]
        node.returns = None
        for argument in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg,
                         node.args.kwarg]:  # fmt: skip
            if argument is not None:
                argument.annotation = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is None:
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=self.visit(node.value), lineno=node.lineno)


def last_name(expr: ast.expr) -> str:
    """The called or read name's last part: `torch.ops.x.f` -> "f", `f` -> "f", `M % 16` -> "M" (a divisibility
    test is about M); "" for any other expression."""
    if isinstance(expr, ast.BinOp):
        return last_name(expr.left)
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return expr.id if isinstance(expr, ast.Name) else ""


_RECORD_BASES = ("NamedTuple", "BaseModel", "TypedDict")


def record_fields(cls: ast.ClassDef) -> frozenset[str]:
    """The annotated names of a dataclass-like class (@dataclass, NamedTuple, BaseModel, TypedDict): per-instance
    fields whose class-level values are only defaults."""
    decorators = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in cls.decorator_list]
    record = any(d.rsplit(".", 1)[-1] == "dataclass" for d in decorators)
    record = record or any(ast.unparse(base).rsplit(".", 1)[-1] in _RECORD_BASES for base in cls.bases)
    if not record:
        return frozenset()
    return frozenset(s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))


# Nodes that hold no other node a scan looks for (a call, a choice, an assignment): names, constants, operators.
_LEAVES = (ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)


def walk_inner(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk(node) without the leaves under node (names, constants, operators): node and the nodes under it
    that can hold a call, a conditional expression, a comprehension or an assignment, in ast.walk's order (breadth
    first), without ast.walk's generator layers (the scans walk every expression of the functions a commit changes,
    and CuTe DSL modules have thousands of lines)."""
    todo: deque[ast.AST] = deque([node])
    take, put = todo.popleft, todo.append
    while todo:
        node = take()
        for name in node._fields:
            field = getattr(node, name, None)
            if isinstance(field, ast.AST):
                if not isinstance(field, _LEAVES):
                    put(field)
            elif isinstance(field, list):
                for item in field:
                    if isinstance(item, ast.AST) and not isinstance(item, _LEAVES):
                        put(item)
        yield node


_LOADED = "_bisect_loaded_names"  # the attribute of a node that keeps loaded_names' set


def loaded_names(node: ast.AST) -> frozenset[str]:
    """The names read anywhere under node (nested functions included), walked once per node and kept on it."""
    found: frozenset[str] | None = getattr(node, _LOADED, None)
    if found is None:
        found = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
        setattr(node, _LOADED, found)
    return found
