"""Literal tables, constants, Triton autotune configs and heuristics of one Python module, read with ast.

Nothing is imported or executed: module- and class-level assignments are evaluated when they are literals
(literals.py: names of other literal constants resolved, simple arithmetic folded); anything else becomes a
Symbol compared by its source text. diff_python compares two scans of one file.
"""

from __future__ import annotations

import ast
import gc
import re
from dataclasses import dataclass, field, replace

from bisector.analysis import literals
from bisector.analysis.code_shape import FunctionNode, parameter_defaults, record_fields, statement_blocks
from bisector.analysis.dispatch_sites import SiteScan, diff_sites, scan_sites
from bisector.analysis.env_gates import EnvGates, EnvMemo, diff_env_gates, scan_env_gates
from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.literals import CONFIG_TAG, SCALARS, LiteralEvaluator, plain_value, wrapped_literal
from bisector.analysis.local_tables import local_tables
from bisector.analysis.renamed_entries import without_renamed_keys, without_renames
from bisector.analysis.rules import produce, stamped
from bisector.analysis.top_level import Unchanged, same_methods, same_top_level
from bisector.analysis.values import Leaf, Mapping, Node, Symbol, diff_entries, render


@dataclass(frozen=True)
class PythonScan:
    entries: dict[str, tuple[FindingKind, Node]]  # "_TABLE", "Cls.TABLE", "kernel@triton.autotune" -> tree
    functions: dict[str, FunctionNode]  # by qualified name: "threshold_for", "Dispatcher.pick"
    sites: SiteScan = field(default_factory=SiteScan)  # launch sites and branch conditions in functions
    env_gates: EnvGates = field(default_factory=dict)
    env_names: frozenset[str] = frozenset()  # string constants that name an env variable a read uses
    fields: frozenset[str] = frozenset()  # "Class.field" of dataclass-like classes: defaults of instance fields
    conditional: frozenset[str] = frozenset()  # tables chosen by a condition: NUM_WARPS = [2] if HOPPER else [4]
    classes: frozenset[str] = frozenset()  # the module's classes, nested ones qualified ("Outer.Inner")


@dataclass(frozen=True)
class ParsedModule:
    tree: ast.Module
    lines: list[str]
    numbered: bool = True  # lines[n - 1] is the tree's line n (str.splitlines also splits at \f, \v, \x1c, ...)


def parse_module(source: str | bytes) -> ParsedModule:
    """Parse a module's source; raises SyntaxError (or ValueError for null bytes) when it does not parse."""
    collecting = gc.isenabled()
    gc.disable()  # a parse makes no reference cycles; collections during it only slow it (a third of its time)
    try:
        tree = ast.parse(source)
    finally:
        if collecting:
            gc.enable()
    text = source.decode("utf-8", errors="replace") if isinstance(source, bytes) else source
    return ParsedModule(tree, text.splitlines(), re.search("[\v\f\x1c\x1d\x1e\x85\u2028\u2029]", text) is None)


def scan_pair(before: ParsedModule | None, after: ParsedModule | None) -> tuple[PythonScan | None, PythonScan | None]:
    """Scan both versions of a module; launch sites and conditions are read only in the top-level functions and
    classes, and the methods of the other classes, whose text changed (the others scan the same on both sides)."""
    if before is None or after is None:
        return (None if before is None else scan_python(before), None if after is None else scan_python(after))
    old_same, new_same = same_top_level(before.tree, before.lines, after.tree, after.lines)
    methods = same_methods(before.tree, before.lines, after.tree, after.lines)
    memo: EnvMemo = {}  # the env reads of the statements both versions share are found once
    old, new = scan_python(before, (old_same, methods), memo), scan_python(after, (new_same, methods), memo)
    if old.sites.skipped != new.sites.skipped:  # a skipped method saw other gates on one side: no method skipped
        old = replace(old, sites=scan_sites(before.tree, old_same, frozenset()))
        new = replace(new, sites=scan_sites(after.tree, new_same, frozenset()))
    return old, new


def scan_python(
    source: str | bytes | ParsedModule,
    unchanged: Unchanged = (frozenset(), frozenset()),
    env_memo: EnvMemo | None = None,
) -> PythonScan:
    """Scan a module's source (raises SyntaxError or ValueError when it does not parse); unchanged: top-level
    statements and class methods whose launch sites and conditions are not read (scan_pair); env_memo: the env reads
    of statements the other version has already shown (scan_pair)."""
    parsed = source if isinstance(source, ParsedModule) else parse_module(source)
    tree = parsed.tree
    scanner = _Scanner(parsed.lines)
    scanner.scan_body(tree.body, prefix="", env={})
    gates, env_names = scan_env_gates(tree, parsed if parsed.numbered else None, env_memo)
    sites, fields, conditional = scan_sites(tree, *unchanged), frozenset(scanner.fields), frozenset(scanner.conditional)
    classes = frozenset(scanner.classes)
    return PythonScan(scanner.entries, scanner.functions, sites, gates, env_names, fields, conditional, classes)


def diff_python(path: str, before: PythonScan | None, after: PythonScan | None) -> list[Finding]:
    """Keyed rows for every table entry, constant, autotune config or heuristic that differs, and the launch
    arguments, dispatch conditions and env gates that differ (readers.py reads no tests). A constant that only names
    an env variable is shown by its gate rows; a field added to or removed from a dataclass-like class is a new or
    dropped parameter (a changed default is a row)."""
    old = before.entries if before else {}
    new = after.entries if after else {}
    env_names = (before.env_names if before else frozenset()) | (after.env_names if after else frozenset())
    fields = (before.fields if before else frozenset()) | (after.fields if after else frozenset())
    # a conditional table or a flag only shows when it changes: a new one is a new gate, shown by its readers
    conditional = (before.conditional if before else frozenset()) | (after.conditional if after else frozenset())
    old = {name: entry for name, entry in old.items() if name in new or name not in conditional | _flags(old)}
    new = {name: entry for name, entry in new.items() if name in old or name not in conditional | _flags(new)}
    old = {name: entry for name, entry in old.items() if name not in env_names and (name in new or name not in fields)}
    new = {name: entry for name, entry in new.items() if name not in env_names and (name in old or name not in fields)}
    old, new = without_renames(old, new)
    if before is not None and after is not None:
        old = _without_dropped_classes(old, before.classes - after.classes)
    functions = (before.functions if before else {}), (after.functions if after else {})
    findings = without_renamed_keys(_without_aliases(diff_entries(path, old, new)), *functions)
    findings = stamped("python_tables", findings)
    sites = diff_sites(path, before.sites if before else None, after.sites if after else None)
    gates = produce(
        "env_gates", diff_env_gates, path, before.env_gates if before else None, after.env_gates if after else None
    )
    return findings + sites + gates


def _without_dropped_classes(
    old: dict[str, tuple[FindingKind, Node]], gone: frozenset[str]
) -> dict[str, tuple[FindingKind, Node]]:
    """Less the tables of a class the commit removes whole (a kernel loader dropped with its REGISTRY): its users
    had to change too, and their rows show what now runs instead."""
    return {name: entry for name, entry in old.items() if name.rpartition(".")[0] not in gone}


def _flags(entries: dict[str, tuple[FindingKind, Node]]) -> frozenset[str]:
    """Flags (HAS_SM90 = True) and run-time placeholders (_cap = None): a new or dropped one is shown by its readers."""
    return frozenset(
        name for name, (_, node) in entries.items() if isinstance(node, Leaf) and node.text in ("True", "False", "None")
    )


def _without_aliases(findings: list[Finding]) -> list[Finding]:
    """`BwOp.MAX_K = FwOp.MAX_K`: the alias's row repeats the row of the constant it names; left out. An autotune
    list that names a changed table is no alias: it is what the kernel's search tries."""
    named = {f.name for f in findings}
    return [
        f
        for f in findings
        if f.kind is FindingKind.AUTOTUNE_CONFIG
        or not any(text and text.startswith(f"{other} (") for other in named - {f.name} for text in (f.before, f.after))
    ]


class _Scanner:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.fields: set[str] = set()  # "Class.field" of dataclass-like classes
        self.conditional: set[str] = set()
        self.entries: dict[str, tuple[FindingKind, Node]] = {}
        self.functions: dict[str, FunctionNode] = {}
        self.classes: set[str] = set()

    def scan_body(
        self, body: list[ast.stmt], prefix: str, env: dict[str, Node], fields: frozenset[str] = frozenset()
    ) -> None:
        for statement in body:
            if isinstance(statement, ast.Assign | ast.AnnAssign):
                self._assignment(statement, prefix, env)
            elif isinstance(statement, ast.ClassDef) and not _is_enum(statement):
                self.classes.add(prefix + statement.name)
                class_env = dict(env)
                fields = record_fields(statement)
                self.fields.update(f"{prefix}{statement.name}.{name}" for name in fields)
                self.scan_body(statement.body, f"{prefix}{statement.name}.", class_env, fields)
                for name, node in class_env.items():
                    if env.get(name) is not node:
                        env[f"{statement.name}.{name}"] = node
            elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                self._function(statement, prefix, env, fields)
            elif isinstance(statement, ast.If | ast.Try | ast.With):
                self._definitions_in(statement, prefix, env)
            elif isinstance(statement, ast.Expr):
                literals.add_updated_entries(statement.value, env)

    def _definitions_in(self, statement: ast.stmt, prefix: str, env: dict[str, Node]) -> None:
        """Everything under a module-level if / try / with (`if HAS_TRITON: CONFIGS = [...]; @triton.autotune ...`).
        A table an if binds in both branches is kept once per branch: "CONFIGS (if is_hip())", "CONFIGS (else)"."""
        if isinstance(statement, ast.If):
            self._branches(statement, prefix, env)
            return
        for block in statement_blocks(statement):
            self.scan_body(block, prefix, env)

    def _branches(self, statement: ast.If, prefix: str, env: dict[str, Node]) -> None:
        """A name bound in one branch only that was bound before (`if cc >= 12: HAS_XFORMERS = False`) is an
        override under a condition: the entry keeps its unconditional value, the condition's row shows the rest."""
        body, orelse = _bound(statement.body, prefix), _bound(statement.orelse, prefix)
        both = body & orelse
        overridden = {name for name in body ^ orelse if name.removeprefix(prefix) in env}
        earlier = {name: self.entries.get(name) for name in overridden}
        test = ast.unparse(statement.test)
        before = dict(env)
        after_body: dict[str, Node] = {}
        for block, label in ((statement.body, f"if {test}"), (statement.orelse, "else")):
            if label == "else":  # the else branch (an elif chain) sees the names as they were before the if
                after_body = dict(env)
                env.clear()
                env.update(before)
            self.scan_body(block, prefix, env)
            for name in both & set(self.entries):
                self.entries[f"{name} ({label})"] = self.entries.pop(name)
        for name, value in after_body.items():
            env.setdefault(name, value)
        for name, entry in earlier.items():
            if entry is None:
                self.entries.pop(name, None)
            else:
                self.entries[name] = entry

    def _assignment(self, statement: ast.Assign | ast.AnnAssign, prefix: str, env: dict[str, Node]) -> None:
        if statement.value is None:
            return
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        evaluator = LiteralEvaluator(env)
        for target in targets:
            if isinstance(target, ast.Name):
                member = FindingKind.CONSTANT if literals.member_of_annotated_type(statement) else None
                self._bind(prefix, target.id, statement.value, evaluator.eval(statement.value), env, member)
            elif isinstance(target, ast.Tuple) and isinstance(statement.value, ast.Tuple | ast.List):
                if len(target.elts) == len(statement.value.elts):
                    for element, value in zip(target.elts, statement.value.elts, strict=True):
                        if isinstance(element, ast.Name):
                            self._bind(prefix, element.id, value, evaluator.eval(value), env)
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                self._set_item(prefix, target, evaluator, statement.value, env)

    def _bind(
        self,
        prefix: str,
        name: str,
        source: ast.expr,
        node: Node,
        env: dict[str, Node],
        kind: FindingKind | None = None,
    ) -> None:
        env[name] = plain_value(node)
        if (name.startswith("__") and name.endswith("__")) or _TEST_DATA.search(name):
            return
        kind = kind or _kind_of(source, node)
        if isinstance(source, ast.IfExp) and kind is not None:
            self.conditional.add(prefix + name)
        if kind is not None:
            self.entries[prefix + name] = (kind, node)
        else:
            self.entries.pop(prefix + name, None)

    def _set_item(
        self, prefix: str, target: ast.Subscript, evaluator: LiteralEvaluator, value: ast.expr, env: dict[str, Node]
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

    def _function(
        self,
        function: ast.FunctionDef | ast.AsyncFunctionDef,
        prefix: str,
        env: dict[str, Node],
        fields: frozenset[str],
    ) -> None:
        name = prefix + function.name
        evaluator = LiteralEvaluator(env)
        for decorator in function.decorator_list:
            if not isinstance(decorator, ast.Call):
                continue
            called = ast.unparse(decorator.func)
            configs = any(kw.arg == "configs" for kw in decorator.keywords)  # a tuner by its arguments: libtuner
            if called.rsplit(".", 1)[-1].endswith("autotune") or configs:  # triton.autotune, fla_cache_autotune
                self.entries[f"{name}@{called}"] = (FindingKind.AUTOTUNE_CONFIG, _autotune(decorator, evaluator))
            elif called.rsplit(".", 1)[-1] == "heuristics" and decorator.args:
                self.entries[f"{name}@{called}"] = (FindingKind.HEURISTIC, evaluator.eval(decorator.args[0]))
        for parameter, default in _parameter_defaults(function):
            self.entries[f"{name}({parameter})"] = (FindingKind.CONSTANT, evaluator.eval(default))
            self.fields.add(f"{name}({parameter})")  # like a record's field: a new parameter is no row
        self.functions[name] = function
        if _TUNING_FUNCTION.search(function.name):
            self.scan_body(local_tables(function.body), f"{name}.<locals>.", dict(env))


# Values kept for the tests (_TEST_K, TEST_SHAPES): they choose nothing in the library.
_TEST_DATA = re.compile(r"(^|_)TESTS?(_|$)", re.I)

# A function that builds a tuning space by its name: get_autotune_config, get_all_configs, tuned_params; or a kernel
# dispatch map (_init_kernels_dispatch), or the list of kernels a generator writes (list_large_kernels).
_TUNING_FUNCTION = re.compile(r"config|tune|tuning|heuristic|dispatch|kernels$", re.I)


def _parameter_defaults(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.expr]]:
    """A function's parameters whose default is a number, a string or a bool (`max_par=16`, `backend="triton"`):
    what every caller that passes none runs with."""
    return [
        (name, default)
        for name, default in parameter_defaults(function)
        if isinstance(default, ast.Constant) and type(default.value) in (int, float, str, bool)
    ]


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
    if isinstance(source, ast.Dict | ast.List | ast.Tuple | ast.Set) or wrapped_literal(source) is not None:
        return FindingKind.TABLE_ENTRY
    if isinstance(source, ast.IfExp) and all(_is_literal(branch) for branch in (source.body, source.orelse)):
        return FindingKind.TABLE_ENTRY  # NUM_WARPS = [2] if IS_HOPPER else [2, 4, 8]
    if isinstance(node, Leaf) and isinstance(node.value, SCALARS):
        return FindingKind.CONSTANT
    if _config_call(source):
        return FindingKind.TABLE_ENTRY  # CONFIGS = make_configs([128, 256], [4, 8])
    return None


def _config_call(source: ast.expr) -> bool:
    """A call of a config-making function (its name says config / tune) with literal arguments, a list among them:
    the tuning space it builds is chosen by those lists."""
    if not isinstance(source, ast.Call) or not _TUNING_FUNCTION.search(ast.unparse(source.func).rsplit(".", 1)[-1]):
        return False
    arguments = [*source.args, *(kw.value for kw in source.keywords)]
    return (
        bool(arguments)
        and all(map(_is_literal, arguments))
        and any(isinstance(a, ast.List | ast.Tuple | ast.Set) for a in arguments)
    )


def _is_literal(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant | ast.Dict | ast.List | ast.Tuple | ast.Set) and not any(
        isinstance(node, ast.Call | ast.Name | ast.Attribute) for node in ast.walk(expr)
    )


def _autotune(decorator: ast.Call, evaluator: LiteralEvaluator) -> Mapping:
    """configs (keyed by their meta-parameters), key and the other arguments of one triton.autotune."""
    arguments: list[tuple[str, ast.expr]] = list(zip(("configs", "key"), decorator.args, strict=False))
    arguments += [(kw.arg, kw.value) for kw in decorator.keywords if kw.arg is not None]
    result = Mapping(line=decorator.lineno)
    for name, expr in arguments:
        result.entries[name] = (name, _with_tables_read(evaluator.eval(expr), expr, evaluator.env))
    return result


def _with_tables_read(value: Node, expr: ast.expr, env: dict[str, Node]) -> Node:
    """A value that is no literal (`[Config(...) for w in NUM_WARPS]`) compared with the module tables it reads,
    so that a changed NUM_WARPS changes the autotune list that iterates it."""
    if not (isinstance(value, Leaf) and isinstance(value.value, Symbol)):
        return value
    read = sorted({node.id for node in ast.walk(expr) if isinstance(node, ast.Name) and node.id in env})
    if not read:
        return value
    text = value.text + "".join(f"; {name} = {render(env[name])}" for name in read)
    return Leaf(Symbol(text), text, value.line)
