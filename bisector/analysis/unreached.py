"""Rows of the Python static diff whose change reaches no kernel choice, judged over the commit's changed modules.

    if __name__ == "__main__":          a script's own code: the library never runs it, so its constants,
        b, m = 1, 1024                  conditions and launches choose nothing a caller gets
    if os.environ.get("X_DEBUG") == "1":
        print("restored", config)       a condition whose branches only print or log chooses no kernel (nor
    if x.dtype != torch.float16:        one that casts or reshapes a value in place: the same kernel runs on
        x = x.half()                    it)
    DEBUG = os.getenv("X_DEBUG") == "1" an env read whose value reaches only such conditions (or print / log
    ...  if DEBUG: logger.info(...)     arguments), in any changed module that reads the name, is no gate
    benchmark/run_bench.py              a program outside the package (no __init__.py beside it, a __main__
                                        block or calls at its top level) that defines and launches no kernel:
                                        the library never reads its values (the env variables it reads stay
                                        gates: a test may run the program)

A row is dropped only when every place it names (on both sides of the commit) is shown to reach nothing but
output; a read the analysis cannot follow (returned, passed to a call, stored where no changed module reads it)
keeps the row.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterable, Mapping

from bisector.analysis.env_gates import env_reads
from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.python_tables import ParsedModule
from bisector.analysis.reach import launches_kernels

Versions = tuple[ParsedModule | None, ParsedModule | None]  # a changed module before and after the commit

_OUTPUT_CALL = re.compile(
    r"^(print\w*|pprint|log|debug|info|warning|warn|error|exception|critical|write|flush)(?:_once)?$"
)
# x = x.half(), x = x.unsqueeze(0): the value cast or reshaped in place, the same kernel runs on it
_CAST = re.compile(r"^(half|float|bfloat16|double|to|type|contiguous|unsqueeze|squeeze|reshape|view|flatten)$")
_OUTPUT_OWNER = re.compile(r"^_?(log|logger|logging|warnings|std(out|err)|console)$", re.I)
# A build script (setup.py, build_ext.py) or a kernel generator (kernel-generator.py, generate_kernels.py,
# gen_instances.py) runs as __main__ when the package is built: its main block chooses what is compiled.
_BUILD_SCRIPT = re.compile(r"(^|/)(setup|build|[\w-]*generat|gen_)[\w-]*\.py$")
_JUDGED = frozenset(
    {
        FindingKind.CONSTANT,
        FindingKind.TABLE_ENTRY,
        FindingKind.AUTOTUNE_CONFIG,
        FindingKind.HEURISTIC,
        FindingKind.LAUNCH_PARAM,
        FindingKind.BRANCH_CONDITION,
        FindingKind.ENV_GATE,
        FindingKind.DISPATCH_LOGIC,
    }
)
_MAX_STORE_DEPTH = 3
_DEFINITIONS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)  # an env value kept in a name, kept in another name, ...


def without_unreached(
    findings: list[Finding], modules: Mapping[str, Versions], scripts: frozenset[str] = frozenset()
) -> list[Finding]:
    """The findings less the Python rows whose change reaches no kernel choice (see the module's docstring).
    scripts: the changed modules that no package holds (no __init__.py beside them, not at the top)."""
    if not modules:
        return findings
    index = _Index(modules)
    outside = {
        path for path in scripts & modules.keys() if not _BUILD_SCRIPT.search(path) and index.kernel_free_program(path)
    }
    return [
        f
        for f in findings
        if f.file not in modules
        or not ((f.file in outside and f.kind is not FindingKind.ENV_GATE) or index.unreached(f))
    ]  # an env variable a script reads is one the bisect's test may set when it runs the script


class _Tree:
    """One version of a changed module, with what the judgement reads of it, each built when first asked."""

    def __init__(self, parsed: ParsedModule, script: bool) -> None:
        self.module = parsed.tree
        self.text = "\n".join(parsed.lines)
        self.main_lines = frozenset() if script else _main_lines(self.module)
        self._starts = [statement.lineno for statement in self.module.body]
        self._parents: dict[int, dict[ast.AST, ast.AST]] = {}  # top-level statement index -> parents in it
        self._env: dict[str, list[ast.AST]] | None = None
        self._tests: dict[str, list[ast.If | ast.While]] = {}  # outer function -> its ifs and whiles
        self._test_texts: dict[int, str] = {}  # id() of an if or while -> its test as rows show it

    def parent(self, node: ast.AST) -> ast.AST | None:
        """The node's parent, from a map of the top-level statement that holds it (built once per statement)."""
        line = getattr(node, "lineno", None)
        if line is None:
            return None
        index = bisect.bisect_right(self._starts, line) - 1
        if index < 0:
            return None
        if index not in self._parents:
            statement = self.module.body[index]
            parents: dict[ast.AST, ast.AST] = {statement: self.module}
            for holder in ast.walk(statement):
                for child in ast.iter_child_nodes(holder):
                    parents[child] = holder
            self._parents[index] = parents
        return self._parents[index].get(node)

    def env_reads(self, variable: str) -> list[ast.AST]:
        if variable not in self.text:
            return []
        if self._env is None:
            self._env = {}
            for node, name in env_reads(self.module):
                self._env.setdefault(name, []).append(node)
        return self._env.get(variable, [])

    def tests(self, function: str) -> list[ast.If | ast.While]:
        """The if and while statements of a function ("Cls.method"; a closure's outer function; the whole module
        for "<module>" or a name it does not define)."""
        outer = function.split(".<locals>.", 1)[0]
        if outer in self._tests:
            return self._tests[outer]
        scope: ast.AST = self.module
        body = self.module.body
        for part in outer.split("."):
            found = next((s for s in body if isinstance(s, _DEFINITIONS) and s.name == part), None)
            if found is None:
                break
            scope, body = found, found.body
        self._tests[outer] = [node for node in ast.walk(scope) if isinstance(node, ast.If | ast.While)]
        return self._tests[outer]

    def test_text(self, node: ast.If | ast.While) -> str:
        """The statement's test as a row shows it (short_text), made once."""
        if id(node) not in self._test_texts:
            self._test_texts[id(node)] = short_text(ast.unparse(node.test))
        return self._test_texts[id(node)]


class _Index:
    def __init__(self, modules: Mapping[str, Versions]) -> None:
        self.modules = modules
        self.trees: dict[str, tuple[_Tree | None, _Tree | None]] = {}
        self._loads: dict[str, list[tuple[_Tree, ast.AST]]] = {}

    def versions(self, path: str) -> tuple[_Tree | None, _Tree | None]:
        if path not in self.trees:
            script = _BUILD_SCRIPT.search(path) is not None
            old, new = self.modules[path]
            self.trees[path] = (
                None if old is None else _Tree(old, script),
                None if new is None else _Tree(new, script),
            )
        return self.trees[path]

    def kernel_free_program(self, path: str) -> bool:
        """The module runs as a program (a __main__ block, or calls at its top level) and neither version defines
        or launches a kernel."""
        trees = [tree.module for tree in self.versions(path) if tree is not None]
        program = any(_main_lines(tree) or any(_top_level_call(s) for s in tree.body) for tree in trees)
        return program and not any(launches_kernels(tree) for tree in trees)

    def unreached(self, row: Finding) -> bool:
        if row.kind not in _JUDGED:
            return False
        old, new = self.versions(row.file)
        lined = new if row.after is not None else old  # the version whose line the row gives
        if row.line is not None and lined is not None and row.line in lined.main_lines:
            return True
        if row.kind is FindingKind.BRANCH_CONDITION:
            return self._output_condition(row, old, new)
        if row.kind is FindingKind.ENV_GATE:
            reads = [(tree, node) for tree in (old, new) if tree for node in tree.env_reads(row.name)]
            return bool(reads) and all(self._reaches_output_only(tree, node, 0) for tree, node in reads)
        return False

    def _output_condition(self, row: Finding, old: _Tree | None, new: _Tree | None) -> bool:
        """Every side of the condition row is an if / while whose branches only print or log."""
        sides: list[tuple[_Tree, list[ast.If | ast.While]]] = []
        for tree, text, other_text in ((new, row.after, row.before), (old, row.before, row.after)):
            if text is None or tree is None:
                continue
            lined = (tree is new) or other_text is None  # the row's line is this side's
            found = [
                node
                for node in tree.tests(row.name)
                if (node.test.lineno == row.line if lined else tree.test_text(node) == text)
            ]
            if not found:
                return False
            sides.append((tree, found))
        return bool(sides) and all(_output_only_branches(node) for _, nodes in sides for node in nodes)

    def _reaches_output_only(self, tree: _Tree, node: ast.AST, depth: int) -> bool:
        """The value of node (an env read, a name) reaches only output: an if / while test whose branches print
        or log, an argument of a print / log call, or a name whose every read in the changed modules does."""
        child, parent = node, tree.parent(node)
        while isinstance(parent, ast.expr | ast.keyword | ast.comprehension):
            if isinstance(parent, ast.Call) and _output_call(parent) and child is not parent.func:
                return True
            child, parent = parent, tree.parent(parent)
        if isinstance(parent, ast.If | ast.While) and child is parent.test:
            return _output_only_branches(parent)
        if isinstance(parent, ast.Assign | ast.AnnAssign) and child is parent.value and depth < _MAX_STORE_DEPTH:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            names = [_stored_name(t) for t in targets]
            if not names or None in names:
                return False
            loads = [load for name in names if name for load in self._name_loads(name)]
            return bool(loads) and all(self._reaches_output_only(t, load, depth + 1) for t, load in loads)
        return False

    def _name_loads(self, name: str) -> list[tuple[_Tree, ast.AST]]:
        """Reads of a name (`DEBUG`, `self.DEBUG`, `utils.DEBUG`) in every changed module, both versions."""
        if name not in self._loads:
            trees = [t for path in self.modules for t in self.versions(path) if t is not None]
            self._loads[name] = [
                (tree, node)
                for tree in trees
                if name in tree.text
                for node in ast.walk(tree.module)
                if (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load))
                or (isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load))
            ]
        return self._loads[name]


def _version(module: ParsedModule | None, script: bool) -> _Tree | None:
    return None if module is None else _Tree(module, script)


def _stored_name(target: ast.expr) -> str | None:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return target.attr
    return None


def _output_only_branches(node: ast.If | ast.While) -> bool:
    return _output_only(node.body) and _output_only(node.orelse)


def _output_only(block: Iterable[ast.stmt]) -> bool:
    """Statements that only print, log or warn, or cast a value in place (or nothing), nested ifs of such
    statements included."""
    for statement in block:
        if isinstance(statement, ast.Pass):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) and _output_call(statement.value):
            continue
        if isinstance(statement, ast.If) and _output_only_branches(statement):
            continue
        if _cast(statement):
            continue
        return False
    return True


def _cast(statement: ast.stmt) -> bool:
    """`x = x.half()`, `x = x.to(w.dtype)`: a value cast in place, read by the same code as before."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return False
    value, target = statement.value, statement.targets[0]
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and _CAST.match(value.func.attr) is not None
        and ast.unparse(value.func.value) == ast.unparse(target)
    )


def _output_call(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return bool(_OUTPUT_CALL.match(func.id)) and func.id not in ("write", "flush")
    if isinstance(func, ast.Attribute):
        owner = ast.unparse(func.value).rsplit(".", 1)[-1]
        return bool(_OUTPUT_CALL.match(func.attr)) and bool(_OUTPUT_OWNER.match(owner))
    return False


def _top_level_call(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)


def _main_lines(module: ast.Module) -> frozenset[int]:
    """The lines of the module's `if __name__ == "__main__":` blocks."""
    return frozenset(
        line
        for statement in module.body
        if isinstance(statement, ast.If) and _is_main_guard(statement.test)
        for line in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)
    )


def _is_main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"`."""
    return (
        isinstance(test, ast.Compare)
        and len(test.comparators) == 1
        and {ast.unparse(test.left), ast.unparse(test.comparators[0])} == {"__name__", "'__main__'"}
    )
