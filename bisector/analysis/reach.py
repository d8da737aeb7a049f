"""Which code of one Python module reaches a kernel launch: a call graph of its functions and the local names
that flow into launches.

    def _run(x, BLOCK):  _kernel[grid](x, BLOCK=BLOCK)     _run launches (a launch site)
    def forward(x):                                         forward reaches a launch through _run (the call graph:
        BLOCK_N = 32 if D <= 64 else 64                     module functions, self.method) and BLOCK_N, D flow
        _run(x, BLOCK_N)                                    into it, so `D <= 64` chooses what is launched

A launch is what launch_calls.py reads as one (kernel[grid](...), torch.ops.*, tile-keyword calls), a call of a
decorated kernel of the module, or a call into a native extension module the module imports (`import pkg._qattn
as qattn`, `from pkg import my_ext`). Calls into other Python modules are not followed: a name passed to them
reaches no launch this module can show.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Iterator

from bisector.analysis import code_shape

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
LaunchTest = Callable[[ast.Call], bool]

# The last part of a module name that says it is compiled code: _C, _qattn, my_ext, flash_cuda, fused_kernels.
_NATIVE_MODULE = re.compile(r"^_\w+$|(^|_)(C|ext|cuda|kernels?)$")
# Private Python modules by their usual names (_utils, _compat, _config): helpers, not compiled code.
_PYTHON_HELPER = re.compile(
    r"^_(?:utils?|helpers?|common|compat|config|base|core|types|typing|version|logging|registry|constants|api)$"
)
_KERNEL_DECORATOR = re.compile(r"jit|kernel|autotune|heuristics|custom_op|triton_op")
_MAX_FLOW_ROUNDS = 8  # local assignment chains followed back from a launch argument


class LaunchGraph:
    """The module's call graph to its launches, followed on demand: a function of the module (qualified name:
    "f", "Cls.m") launches when its body (closures included) makes a launching call, or calls a module function
    that launches; each function is read at most once."""

    def __init__(self, tree: ast.Module, is_launch: LaunchTest) -> None:
        self.is_launch = is_launch
        self.native_modules = _native_modules(tree.body)  # local names bound to native extension modules
        self.definitions = {name: (owner, node) for name, owner, node in module_functions(tree.body)}
        self.kernels = frozenset(  # module functions decorated as kernels (@triton.jit, @cute.jit, ...)
            name
            for name, (owner, node) in self.definitions.items()
            if not owner and any(_KERNEL_DECORATOR.search(ast.unparse(d)) for d in node.decorator_list)
        )
        self._launching: dict[str, bool] = {}
        self.bodies: dict[int, list[ast.AST]] = {}  # id() of a function read -> its calls and assignments

    def launches(self, call: ast.Call, owner: str) -> bool:
        """The call launches a kernel, directly or through a launching function of the module; owner: the class
        of the calling method ("" outside classes), for self.method calls."""
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in self.kernels or (bool(call.keywords) and self.is_launch(call)):
                return True
        elif isinstance(func, ast.Attribute):
            base = func.value
            if isinstance(base, ast.Name) and base.id in self.native_modules:
                return True
            if (call.keywords or _rooted_at_torch(base)) and self.is_launch(call):
                return True
        else:
            return isinstance(func, ast.Subscript) and self.is_launch(call)
        callee = callee_name(call, owner)
        return callee in self.definitions and self.launching(callee)

    def launching(self, name: str) -> bool:
        if name not in self._launching:
            self._launching[name] = False  # a recursive call does not launch by itself
            owner, function = self.definitions[name]
            calls = (node for node in self.nodes(function) if isinstance(node, ast.Call))
            self._launching[name] = any(self.launches(call, owner) for call in calls)
        return self._launching[name]

    def nodes(self, function: FunctionNode) -> list[ast.AST]:
        if id(function) not in self.bodies:
            self.bodies[id(function)] = _flow_nodes(function)
        return self.bodies[id(function)]


def launch_flow(function: FunctionNode, graph: LaunchGraph, owner: str) -> tuple[frozenset[str], dict[int, str]]:
    """The local names whose values reach a launching call of the function (its arguments, and the names the
    assignments to those read, `grid = (cdiv(M, BLOCK_M),)`: BLOCK_M too, followed back a few steps); and the
    conditional expressions choosing between literals for one of them: id() -> "BLOCK_N = ... if D <= 64 else
    ..." (that condition chooses a launch parameter whatever it tests; the values are the launch row's)."""
    nodes = graph.nodes(function)
    launching = [node for node in nodes if isinstance(node, ast.Call) and graph.launches(node, owner)]
    if not launching:
        return frozenset(), {}
    names = _loaded(arg for call in launching for arg in [*call.args, *(kw.value for kw in call.keywords), call.func])
    flows: dict[str, list[ast.expr]] = {}
    choices: list[tuple[list[str], ast.IfExp]] = []
    for node in nodes:
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                    flows.setdefault(name, []).append(node.value)
            plain = [t.id for t in targets if isinstance(t, ast.Name)]
            if isinstance(node.value, ast.IfExp) and plain and literal_choice(node.value):
                choices.append((plain, node.value))
    fresh = set(names)
    for _ in range(_MAX_FLOW_ROUNDS):
        fresh = _loaded(value for name in fresh for value in flows.get(name, ())) - names
        if not fresh:
            break
        names |= fresh
    guarded = {
        id(choice): f"{' = '.join(targets)} = ... if {' '.join(ast.unparse(choice.test).split())} else ..."
        for targets, choice in choices
        if any(target in names for target in targets)
    }
    return frozenset(names), guarded


def guards_launch(statement: ast.If, inputs: Callable[[], frozenset[str]], graph: LaunchGraph, owner: str) -> bool:
    """An if whose branches launch different kernels (`elif FAST: fast_ext.f16(q) else: fast_ext.f32(q)`), or set
    a launch input to literals (`if cap == (8, 0): BLOCK_M = 128 else: BLOCK_M = 64`); inputs: the function's
    launch inputs (launch_flow), asked for only when a branch assigns a literal."""
    if statement.orelse:
        body = _launched(statement.body, graph, owner)
        orelse = _launched(statement.orelse, graph, owner)
        if (body or orelse) and body != orelse:
            return True
    assigned = [
        target.id
        for s in [*statement.body, *statement.orelse]
        if isinstance(s, ast.Assign) and _literal(s.value)
        for target in s.targets
        if isinstance(target, ast.Name)
    ]
    return bool(assigned) and not inputs().isdisjoint(assigned)


def literal_choice(expr: ast.IfExp) -> bool:
    """`32 if D <= 64 else 64`: a choice between literals (nested choices too)."""
    return all(_literal(branch) or (isinstance(branch, ast.IfExp) and literal_choice(branch)) for branch in
               (expr.body, expr.orelse))  # fmt: skip


def method_owner(prefix: str) -> str:
    """The class whose methods a walker's prefix names ("Cls." -> "Cls"); "" for functions and closures."""
    return "" if not prefix or ".<locals>." in prefix else prefix.rstrip(".")


def _launched(block: list[ast.stmt], graph: LaunchGraph, owner: str) -> frozenset[str]:
    return frozenset(
        ast.unparse(node.func)
        for statement in block
        for node in code_shape.walk_inner(statement)
        if isinstance(node, ast.Call) and graph.launches(node, owner)
    )


def _literal(expr: ast.expr) -> bool:
    """A number, string, bool or a tuple of them: a tuning value, not a tensor or a computed size."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int | float | str | bool)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return _literal(expr.operand)
    return isinstance(expr, ast.Tuple) and bool(expr.elts) and all(map(_literal, expr.elts))


def module_functions(body: list[ast.stmt]) -> Iterator[tuple[str, str, FunctionNode]]:
    """(qualified name, owning class, node) of module functions and class methods, under module-level if / try."""
    for name, node in code_shape.module_functions(body, under_blocks=True):
        yield name, name.rpartition(".")[0], node


def _flow_nodes(function: FunctionNode) -> list[ast.AST]:
    """The calls and assignments in a function's body, closures included (they run when it calls them)."""
    return [
        node
        for statement in function.body
        for node in code_shape.walk_inner(statement)
        if isinstance(node, ast.Call | ast.Assign | ast.AugAssign | ast.AnnAssign)
    ]


def callee_name(call: ast.Call, owner: str) -> str:
    """The module function a call names: f(...) -> "f", self.m(...) / cls.m(...) -> "Owner.m"."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id in ("self", "cls") and owner:
            return f"{owner}.{func.attr}"
        return f"{func.value.id}.{func.attr}"  # Cls.static_method(...)
    return ""


def _native_modules(body: list[ast.stmt]) -> frozenset[str]:
    """Names the module's own imports (under module-level if / try too) bind to native extension modules."""
    names: set[str] = set()
    for node in code_shape.module_statements(body):
        if isinstance(node, ast.Import):
            names.update(a.asname for a in node.names if a.asname and _native(a.name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names if _native(a.name))
    return frozenset(names)


def _rooted_at_torch(expr: ast.expr) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id == "torch"


def _native(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return bool(_NATIVE_MODULE.search(last)) and not last.startswith("__") and not _PYTHON_HELPER.search(last)


def _loaded(exprs: Iterable[ast.expr]) -> set[str]:
    return {n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
