"""The import graph: layers without cycles, between packages and between modules, read from the source with ast (no
imports run; imports inside functions and under TYPE_CHECKING count)."""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("vocab", "db", "workers", "kernels", "bisector")
# Installed, the folders vocab/, db/, workers/ and kernels/ are bisector.vocab and so on (links in bisector/).
SUBFOLDERS = frozenset(PACKAGES) - {"bisector"}
# What each package may import of the others; everything else is a layering error.
ALLOWED = {
    "vocab": set(),
    "db": {"vocab"},
    "workers": {"vocab"},
    "kernels": set(),
    "bisector": {"vocab", "db", "workers", "kernels"},
}


def imports(path: Path) -> Iterator[tuple[str, ast.ImportFrom | ast.Import]]:
    """Every absolute module name a file imports (at any depth: function-local imports count too)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node


def sources(package: str) -> list[Path]:
    """The package's own files (bisector/'s links to the other folders are theirs)."""
    return sorted(path for path in (ROOT / package).rglob("*.py") if path.resolve().is_relative_to(ROOT / package))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    prefix = ("bisector",) if parts[0] in SUBFOLDERS else ()
    return ".".join((*prefix, *parts)).removesuffix(".__init__")


def layer(name: str) -> str | None:
    """The package an imported module belongs to: bisector.workers.step -> workers; None outside the project."""
    parts = name.split(".")
    if parts[0] != "bisector":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in SUBFOLDERS else "bisector"


def package_edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for module, targets in module_graph().items():
        for target in sorted(targets):
            source, goal = layer(module), layer(target)
            if source is not None and goal is not None and source != goal:
                edges.setdefault((source, goal), []).append(f"{module} -> {target}")
    return edges


def test_every_package_imports_only_the_layers_below_it() -> None:
    wrong = {edge: sites for edge, sites in package_edges().items() if edge[1] not in ALLOWED[edge[0]]}
    assert not wrong, f"imports against the layering: {wrong}"


def test_the_package_graph_has_no_cycle() -> None:
    graph: dict[str, set[str]] = {package: set() for package in PACKAGES}
    for source, target in package_edges():
        graph[source].add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(step == goal or reaches(step, goal, seen | {step}) for step in graph[start] - seen)

    assert [package for package in PACKAGES if reaches(package, package, set())] == []


def test_the_analysis_runs_nothing_itself() -> None:
    """bisector.analysis decides what to run; executing it belongs to workers, reached through bisector."""
    offending = [
        f"{module_name(path)} -> {name}"
        for path in sources("bisector/analysis")
        for name, _ in imports(path)
        if layer(name) == "workers"
    ]
    assert offending == []


def test_no_module_imports_another_modules_private_name() -> None:
    offending = [
        f"{module_name(path)}: from {name} import {alias.name}"
        for package in PACKAGES
        for path in sources(package)
        for name, node in imports(path)
        if isinstance(node, ast.ImportFrom) and layer(name) is not None
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert offending == []


@pytest.mark.parametrize("package", PACKAGES)
def test_the_layer_check_sees_the_package(package: str) -> None:
    """Guards the checks above against passing vacuously (a renamed package would leave them nothing to read)."""
    assert sources(package), f"no sources found for {package}"


def test_the_project_installs_one_import_name() -> None:
    """A user's test must not import our vocab, db, workers or kernels for its own folders of those names."""
    offending = [
        f"{module_name(path)} -> {name}"
        for package in PACKAGES
        for path in sources(package)
        for name, _ in imports(path)
        if name.split(".")[0] in SUBFOLDERS
    ]
    assert offending == []


def module_graph() -> dict[str, set[str]]:
    """Every product module and the product modules it imports (relative imports resolved; `from P import M` of a
    submodule M is an import of P.M)."""
    paths = {module_name(path): path for package in PACKAGES for path in sources(package)}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in paths]
                targets.update(submodules or [base])
        graph[name] = {target for target in targets if target in paths and target != name}
    return graph


def test_no_two_modules_import_each_other_even_through_others() -> None:
    try:
        graphlib.TopologicalSorter(module_graph()).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"an import circle: {' -> '.join(exc.args[1])}")


def _in(*prefixes: str, exact: tuple[str, ...] = ()) -> Callable[[str], bool]:
    return lambda module: module in exact or any(module == p or module.startswith(f"{p}.") for p in prefixes)


DECISION_CORE = _in("bisector.core")
RUNNER = _in("bisector.runner")
EXPLAINER = _in("bisector.analysis", exact=("bisector.explain", "bisector.variant_tester"))
VIEWS = _in("bisector.report", "bisector.dashboard")
CLI = _in("bisector.cli")
WORKERS, STORE, VOCAB = _in("bisector.workers"), _in("bisector.db"), _in("bisector.vocab")
# (who, what it must never import, why)
NEVER = (
    ("the decision core", DECISION_CORE, lambda m: not (DECISION_CORE(m) or VOCAB(m)),
     "value in, actions out: it imports only itself and the vocabulary"),
    ("workers", WORKERS, STORE, "workers never touch the store"),
    ("the explainer", EXPLAINER, RUNNER, "it asks for its runs through explain.CommitRuns, which the runner fulfils"),
    ("views", VIEWS, CLI, "the CLI calls the views, never the other way"),
)  # fmt: skip


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


@pytest.mark.parametrize(("who", "source", "forbidden", "why"), NEVER, ids=[rule[0] for rule in NEVER])
def test_what_a_layer_must_never_import(
    who: str, source: Callable[[str], bool], forbidden: Callable[[str], bool], why: str
) -> None:
    graph = module_graph()
    assert any(source(module) for module in graph), f"{who}: no module matched (renamed?)"
    wrong = sorted(f"{module} -> {target}" for module in graph if source(module) for target in reachable(graph, module)
                   if forbidden(target))  # fmt: skip
    assert wrong == [], f"{who} ({why}): {wrong}"


SPAWNERS = frozenset(("run", "Popen", "check_output", "check_call", "call"))


def _runs_git(path: Path) -> bool:
    """Whether a file imports GitPython or starts `git` itself (subprocess.run(["git", ...]) and the like)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "git" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "git":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SPAWNERS:
            argv = node.args[0] if node.args else None
            if isinstance(argv, ast.List | ast.Tuple) and argv.elts:
                first = argv.elts[0]
                if isinstance(first, ast.Constant) and first.value == "git":
                    return True
    return False


def test_git_is_reached_through_one_layer() -> None:
    """vocab/ is the git layer (gitrepo.py: the git CLI for ranges, worktrees and logs; gitdiff.py: blobs and diffs
    through GitPython); kernels/ is the demo's own program and makes its history itself."""
    offending = sorted(
        module_name(path)
        for package in PACKAGES
        if package not in ("vocab", "kernels")
        for path in sources(package)
        if _runs_git(path)
    )
    assert offending == []
