"""Dispatch inside function bodies, read with ast: kernel launch sites and the branch conditions that choose.

    kernel[grid](x, y, num_warps=8, BLOCK_M=64)     a Triton launch: its grid, keywords and tile positionals
    torch.ops.my_lib.gemm(a, b, 128)               a torch custom-op launch: its arguments
    gemm_sm90(a, b, tile_M=128, cluster_N=2)       a call passing tile / launch keywords (CuTe DSL): its keywords
    if is_hip() / capability >= (9, 0) / x.dtype == torch.float8_e4m3fn / M <= 64 / os.environ.get(...)
                                                   a branch condition on the arch, the dtype, a shape, an env var
    tuned = get_arch() == "gfx950"                 a condition kept in a name (conditions.py): a branch condition
                                                   itself, and `if tuned:` is an arch condition
    while ... / [c for c in configs if ...]        loop and filter conditions are branch conditions too
    def f(device="cuda" if ... else "cpu")         and a choice made in a parameter default
    return capability >= (8, 0)                    so is a predicate's returned comparison (supports(), is_*()), and
    return (x.size <= INT_MAX, size)               one inside a returned tuple

A keyword argument passed as a local name (num_warps=num_warps) shows the assignments to that name in the
function, so a changed heuristic before the launch is a changed launch parameter. Each launch site carries
the if-conditions that lead to it. diff_sites compares two scans of one module.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import zip_longest

from bisector.analysis.code_shape import decorated_as_kernel, loaded_names, walk_inner
from bisector.analysis.conditions import (
    Gate,
    chooses_implementation,
    condition_category,
    gates_read,
    module_gates,
    passed_condition,
    returned_predicates,
    stored_condition,
    walrus_gate,
    without_none_checks,
)
from bisector.analysis.findings import Finding, FindingKind, short_text, shown_pair
from bisector.analysis.launch_arguments import Assignments, assignments, resolved
from bisector.analysis.launch_calls import (
    decorated,
    is_kernel_launch,
    launch_call,
    launch_keywords,
    launch_test,
    tile_positionals,
    torch_op,
)
from bisector.analysis.launch_sites import LaunchSite, launch_rows
from bisector.analysis.reach import LaunchGraph, guards_launch, launch_flow, literal_choice, method_owner
from bisector.analysis.rules import produce

__all__ = ["Branch", "LaunchSite", "SiteScan", "condition_category", "diff_sites", "scan_sites"]

# A function that builds or picks kernel configs (gemm_rcr_config, get_tuning_space, pick_heuristic): each of its
# conditions chooses a config, whatever it tests. Not an autotune pruner: it drops configs before any run.
_CONFIG_FUNCTION = re.compile(r"^(?!.*prune).*(config|tune|tuning|heuristic)", re.I)
_CHOICE = re.compile(r" = \.\.\. if (.*) else \.\.\.$")  # reach.launch_flow's text of a launch input's choice


@dataclass(frozen=True)
class Branch:
    function: str
    test: str  # the whole condition, whitespace collapsed (rows show it cut to MAX_TEXT)
    category: str  # "arch", "version", "dtype", "shape", "env", or "" (not a dispatch condition)
    line: int
    meaning: str = ""  # the definitions of the gates it reads ("tuned = get_arch() == 'gfx950'")
    returned: bool = False  # a predicate's returned comparison (`return cc >= (8, 0)`)
    two_way: bool = False  # an if with an else: it picks one of two paths
    core: str = ""  # the test without its None checks, as the versions are compared ("" when the same as test)
    unread: bool = False  # kept in a local no code reads: no row where it comes or goes, nothing changes it
    rejects: bool = False  # an if without else that only raises: a new or dropped one checks input, picks no path

    @property
    def compared(self) -> str:
        return self.core or self.test


@dataclass
class SiteScan:
    launches: list[LaunchSite] = field(default_factory=list)
    branches: dict[str, list[Branch]] = field(default_factory=dict)  # function -> its branches in order
    skipped: dict[str, dict[str, Gate]] = field(default_factory=dict)  # method not scanned -> the gates it sees


def scan_sites(
    tree: ast.Module, unchanged: frozenset[int] = frozenset(), methods: frozenset[str] = frozenset()
) -> SiteScan:
    """unchanged: indexes of top-level functions and classes that the other version has with the same text and the
    same module gates (top_level.same_top_level): they scan the same on both sides, so neither side scans them.
    methods: qualified names of class methods the same way (top_level.same_methods); the gates each would have
    seen are kept in the scan's skipped, for the caller to check that they are the same on both sides."""
    scan = SiteScan()
    body = [s for i, s in enumerate(tree.body) if i not in unchanged]
    _Walker(scan, module_gates(tree.body), tree, methods).body(body, "", "<module>", ())
    return scan


class _Walker:
    def __init__(self, scan: SiteScan, gates: dict[str, Gate], module: ast.Module, methods: frozenset[str]) -> None:
        self.scan = scan
        self.methods = methods  # class methods not scanned (scan_sites)
        self.counts: dict[tuple[str, str], int] = {}
        self.defs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.assigned: dict[str, Assignments] = {}  # function -> its local assignments, read when it launches
        self.gates: dict[str, dict[str, Gate]] = {"<module>": gates}  # function -> the gates it sees
        self.kernels = decorated(module)
        self.module = module
        self._graph: LaunchGraph | None = None  # what launches in the module (reach.py), read when first needed
        self.flows: dict[str, tuple[frozenset[str], dict[int, str]]] = {}  # function -> reach.launch_flow
        self.owners: dict[str, str] = {}  # method -> its class
        self.collected: dict[str, list[ast.AST]] = {}  # function -> its calls and assignments, as walked
        # function -> (index of a condition no category names, what it becomes if it chooses a launch: the
        # launch-input choice's text, "" to keep its own, None when it chooses none), resolved at the function's end
        self.pending: dict[str, list[tuple[int, Callable[[], str | None]]]] = {}

    def body(self, statements: list[ast.stmt], prefix: str, function: str, conditions: tuple[str, ...]) -> None:
        for statement in statements:
            self.statement(statement, prefix, function, conditions)

    def statement(self, node: ast.stmt, prefix: str, function: str, conditions: tuple[str, ...]) -> None:
        if isinstance(node, ast.ClassDef):
            self.body(node.body, f"{prefix}{node.name}.", function, ())
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + node.name
            if function == "<module>" and name in self.methods:
                self.scan.skipped[name] = dict(self.gates[function])
                return
            self.scan.branches.setdefault(name, [])
            self.defs[name] = node
            self.gates[name] = dict(self.gates[function])
            if not decorated_as_kernel(node):  # a kernel's calls and branches run on the device: nothing chosen
                self.owners[name] = method_owner(prefix)
                for default in (d for d in (*node.args.defaults, *node.args.kw_defaults) if isinstance(d, ast.IfExp)):
                    self._branch(name, default.test)  # device=("cuda" if torch.cuda.is_available() else "cpu")
                self.body(node.body, f"{name}.<locals>.", name, ())
                self._resolve(name, node)
        elif isinstance(node, ast.If):
            guards = partial(self._guards, function, node, method_owner(prefix))
            test = self._branch(
                function, node.test, chooses=chooses_implementation(node), guards=guards, two_way=bool(node.orelse),
                rejects=_rejects_only(node),
            )  # fmt: skip
            self.body(node.body, prefix, function, (*conditions, test))
            self.body(node.orelse, prefix, function, (*conditions, f"not ({test})"))
        else:
            if isinstance(node, ast.While):  # `while num_stages > 0 and ...:` in a config pruner chooses too
                self._branch(function, node.test)
            elif isinstance(node, ast.Return) and node.value is not None:
                for returned in returned_predicates(node.value, function):  # `return capability == (8, 0)`
                    self._branch(function, returned, returned=True)
            self._stored_condition(node, function)
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                self.collected.setdefault(function, []).append(node)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    self.statement(child, prefix, function, conditions)
                elif isinstance(child, ast.expr):
                    self.expression(child, function, conditions)

    def expression(self, node: ast.expr, function: str, conditions: tuple[str, ...]) -> None:
        for child in walk_inner(node):
            if isinstance(child, ast.IfExp):
                self._branch(function, child.test, chosen=partial(self._chosen, function, child))
            elif isinstance(child, ast.NamedExpr) and (walrus := walrus_gate(child)) is not None:
                self.gates[function][walrus[0]] = walrus[1]  # `if ver < 80:` after `(ver := int(arch[3:]))`
            elif isinstance(child, ast.comprehension):  # [c for c in configs if c.kwargs["BLOCK_M"] <= M]
                for test in child.ifs:
                    self._branch(function, test)
            elif isinstance(child, ast.Call):
                self.collected.setdefault(function, []).append(child)
                self._launch(child, function, conditions)
                for keyword in child.keywords:  # f(x, use_fp4=precision == "fp4"): the callee branches on it
                    if keyword.arg and passed_condition(keyword.arg, keyword.value):
                        self._branch(function, keyword.value, chooses=True)

    def _branch(
        self, function: str, test: ast.expr, *, returned: bool = False, chooses: bool = False,
        guards: Callable[[], bool] | None = None, chosen: Callable[[], str | None] | None = None,
        two_way: bool = False, rejects: bool = False,
    ) -> str:  # fmt: skip
        """Record the condition; returns its text. chooses: its branches set the implementation (a backend choice
        whatever it tests); guards: they set launch inputs or launch different kernels (reach.py); chosen: the
        assignment of a launch input it chooses between literals (`BLOCK_N = 32 if D <= 64 else 64`); two_way: an
        if with an else."""
        gates = self.gates[function]
        meaning = "; ".join(gate.text for gate in gates_read(test, gates))
        text = ast.unparse(test)
        category = condition_category(test, gates, text) or ("backend" if chooses else "")
        category = category or ("config" if _CONFIG_FUNCTION.search(function.rsplit(".", 1)[-1]) else "")
        if returned and category == "env":  # a returned env read is an env gate (env_gates.py) already
            return short_text(text)
        core = " ".join(without_none_checks(test).split()) if isinstance(test, ast.BoolOp) else ""
        branch = Branch(
            function, " ".join(text.split()), category, test.lineno, meaning, returned, two_way, core, rejects=rejects
        )
        branches = self.scan.branches.setdefault(function, [])
        if not category and function in self.defs and (guards or chosen):
            resolve = chosen or (lambda: "" if guards and guards() else None)
            self.pending.setdefault(function, []).append((len(branches), resolve))
        branches.append(branch)
        return short_text(branch.test)

    def _resolve(self, function: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """At the end of a function's walk: its calls and assignments (closures' too) are what reach.py reads of
        it, and the conditions no category named are launch conditions when they choose a launch."""
        nodes, depth = self.collected.setdefault(function, []), function.count(".<locals>.") + 1
        for name in [
            n for n in self.collected if n.startswith(f"{function}.<locals>.") and n.count(".<locals>.") == depth
        ]:
            nodes.extend(self.collected[name])  # direct closures, each holding its own closures already
        pending = self.pending.pop(function, [])
        if not pending:
            return
        self.graph.bodies.setdefault(id(node), nodes)
        branches = self.scan.branches[function]
        for index, resolve in pending:
            text = resolve()
            if text is not None:
                chosen = text or branches[index].test
                branches[index] = replace(branches[index], category="launch", test=chosen, core="")

    def _stored_condition(self, node: ast.stmt, function: str) -> None:
        """`tuned = get_arch() == "gfx950"`: a branch condition of the function, and a gate from here on."""
        stored = stored_condition(node, self.gates[function])
        if stored is None:
            return
        names, gate = stored
        if gate.category == "env":  # an env gate row (env_gates.py); module-level ones gate other functions' ifs
            return
        self.gates[function].update(dict.fromkeys(names, gate))
        unread = function in self.defs and all(name.isidentifier() for name in names)  # not self.x, caps["x"]
        unread = unread and loaded_names(self.defs[function]).isdisjoint(names)
        branch = Branch(function, gate.text, gate.category, node.lineno, unread=unread)
        self.scan.branches.setdefault(function, []).append(branch)

    def _flow(self, function: str) -> tuple[frozenset[str], dict[int, str]]:
        """What reaches the function's launches (reach.launch_flow), read when a condition first asks."""
        if function not in self.flows:  # defs has every function a pending condition is in
            self.flows[function] = launch_flow(self.defs[function], self.graph, self.owners.get(function, ""))
        return self.flows[function]

    def _guards(self, function: str, node: ast.If, owner: str) -> bool:
        return guards_launch(node, lambda: self._flow(function)[0], self.graph, owner)

    def _chosen(self, function: str, node: ast.IfExp) -> str | None:
        return self._flow(function)[1].get(id(node)) if literal_choice(node) else None

    @property
    def graph(self) -> LaunchGraph:
        if self._graph is None:
            self._graph = LaunchGraph(self.module, launch_test(self.kernels))
        return self._graph

    def _launch(self, call: ast.Call, function: str, conditions: tuple[str, ...]) -> None:
        arguments: dict[str, str] = {}
        if isinstance(call.func, ast.Subscript) and is_kernel_launch(call.func, self.kernels):  # kernel[grid](...)
            kernel = f"{ast.unparse(call.func.value)}[...]"
            arguments["grid"] = short_text(ast.unparse(call.func.slice))
            arguments.update(tile_positionals(call.args))
            arguments.update(launch_keywords(call))
        elif torch_op(call.func):
            kernel = ast.unparse(call.func).removesuffix(".default")
            arguments.update((f"arg{i}", short_text(ast.unparse(a))) for i, a in enumerate(call.args))
            arguments.update(launch_keywords(call))
        elif launch_call(call):  # gemm_sm90(a, b, tile_M=128), wrapper(q, k, pv_accum_dtype="fp32")
            kernel = ast.unparse(call.func)
            arguments.update(launch_keywords(call))
        else:
            return
        key = (function, kernel)
        occurrence = self.counts.get(key, 0)
        self.counts[key] = occurrence + 1
        condition = " and ".join(conditions)
        if function not in self.assigned and function in self.defs:
            self.assigned[function] = assignments(self.defs[function])
        arguments = resolved(arguments, self.assigned.get(function, {}))
        positionals = tuple(short_text(ast.unparse(argument)) for argument in call.args)
        site = LaunchSite(function, kernel, occurrence, arguments, condition, call.lineno, positionals)
        self.scan.launches.append(site)


def _rejects_only(node: ast.If) -> bool:
    """An if without else whose body only raises: a check of the caller's input (`if n % 128: raise ValueError`)."""
    return not node.orelse and all(isinstance(statement, ast.Raise) for statement in node.body)


def _without_new_size_checks(removed: list[Branch], added: list[Branch]) -> tuple[list[Branch], list[Branch]]:
    """Less the size checks of the input added or dropped: those on one side beyond the ones the other side has in
    their place (a check changed stays a row)."""
    old_checks, new_checks = [b for b in removed if _checks_size(b)], [b for b in added if _checks_size(b)]
    paired = min(len(old_checks), len(new_checks))
    extra = {id(b) for b in (*old_checks[paired:], *new_checks[paired:])}
    return [b for b in removed if id(b) not in extra], [b for b in added if id(b) not in extra]


def _checks_size(branch: Branch) -> bool:
    """A size check of the caller's input (`if n % block != 0: raise ValueError(...)`); not a platform, arch or env
    check that raises, which says where the code can run."""
    return branch.rejects and branch.category == "shape"


def diff_sites(path: str, before: SiteScan | None, after: SiteScan | None) -> list[Finding]:
    """Rows for launch arguments (and launch conditions) that differ, and for dispatch conditions (arch, dtype,
    shape, env) added, removed or changed in a function. A launch added or removed with the branch that leads to it
    (`elif arch == "sm121": kernel(...)`) is shown by that branch's row."""
    old, new = before or SiteScan(), after or SiteScan()
    branches = produce("dispatch_conditions", _branch_rows, path, old.branches, new.branches)
    whole = {(f.name, f.after or f.before) for f in branches if f.before is None or f.after is None}
    launches = [
        f
        for f in produce("launch_arguments", launch_rows, path, old.launches, new.launches)
        if not (f.key == "launch" and any(_led_by(f, function, test) for function, test in whole))
    ]
    return [*launches, *branches]


def _led_by(row: Finding, function: str, test: str | None) -> bool:
    """The launch row's site is in function, under test (its innermost condition)."""
    detail = row.detail
    return (
        bool(test)
        and detail.startswith(f"in {function}; when ")
        and (detail.endswith(f"when {test}") or detail.endswith(f" and {test}"))
    )


def _branch_rows(path: str, old: dict[str, list[Branch]], new: dict[str, list[Branch]]) -> list[Finding]:
    rows: list[Finding] = []
    for function in [*old, *(f for f in new if f not in old)]:
        was, now = old.get(function, []), new.get(function, [])
        before_tests, after_tests = [b.compared for b in was], [b.compared for b in now]
        matcher = difflib.SequenceMatcher(a=before_tests, b=after_tests, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            # a condition that only moved within the function (same text on both sides) is not a change
            removed = [b for b in was[i1:i2] if before_tests.count(b.compared) > after_tests.count(b.compared)]
            added = [b for b in now[j1:j2] if after_tests.count(b.compared) > before_tests.count(b.compared)]
            removed = [b for b in removed if _rechosen(b, now) and not b.unread]
            added = [b for b in added if _rechosen(b, was) and not b.unread]
            removed, added = _without_new_size_checks(removed, added)
            if function not in old or function not in new:  # a new or dropped predicate shows where it is called
                removed, added = [b for b in removed if _alone(b)], [b for b in added if _alone(b)]
                if ".<locals>." in function and function.rsplit(".<locals>.", 1)[0] in old.keys() & new.keys():
                    removed, added = [], []  # a new or dropped closure: its enclosing function's rows show it
            for was_branch, now_branch in zip_longest(removed, added):
                rows.extend(_branch(path, function, was_branch, now_branch))
    return rows


def _rechosen(branch: Branch, other: list[Branch]) -> bool:
    """A launch input a condition starts or stops choosing between literals (`tile_m = ... if cap == 10 else
    ...`) is shown by the launch row that reads it, and so is an if that became such a choice (the same test, the
    same values); the condition is a row when the other side's choice by the same test was of another input (it
    chose num_stages before, BLOCK_N now)."""
    if branch.category != "launch":
        return True
    condition = _chosen_condition(branch)
    choices = [_chosen_condition(b) for b in other if _chosen_condition(b) != b.test]
    return condition in choices if condition != branch.test else condition not in choices


def _chosen_condition(branch: Branch) -> str:
    match = _CHOICE.search(branch.test)
    return match.group(1) if match else branch.test


def _alone(branch: Branch) -> bool:
    """Shown with a function added or dropped whole: a returned predicate or a version test is new code."""
    return not branch.returned and branch.category != "version"


def _branch(path: str, function: str, was: Branch | None, now: Branch | None) -> list[Finding]:
    """A version test added or dropped is new code, but for an if / else in a function both versions have: it
    picks the code each library version runs (`if flash_attn.__version__ <= "2.6.3": ... else: ...`)."""
    category, shown = (now.category if now else "") or (was.category if was else ""), now or was
    if not category or (category == "version" and not (was and now) and not (shown and shown.two_way)):
        return []
    line = now.line if now else was.line if was else None
    before, after = shown_pair(was.test if was else None, now.test if now else None)
    meaning = (now.meaning if now else "") or (was.meaning if was else "")
    detail = f"where {meaning}" if meaning else ""
    return [Finding(FindingKind.BRANCH_CONDITION, path, function, f"{category} condition", before, after, line, detail)]
