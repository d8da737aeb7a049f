"""Environment-variable gates of one Python module, read with ast, and the gates a commit adds, removes or flips.

A gate is a read of an environment variable: os.environ.get("X", "0"), os.environ["X"], os.getenv("X"),
"X" in os.environ, a settings class's declaration (X = EnvVar("X", None)), or an attribute of a settings object
(envs.X, vllm-style); or a write the stack will read, os.environ["X"] = "ieee" (not of the process's own PATH,
HOME, USER, ...). Each read is kept with the
expression around it (int(...), == "1", .lower() in (...)) and the function that reads it, so a changed
default or comparison is a flipped gate and a new reading function is a gate added there.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator, Mapping

from bisector.analysis.changed_statements import statement_texts
from bisector.analysis.code_shape import ParsedSource
from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.word_lines import holds_match, lines_holding, on_lines

_ENVIRON = re.compile(r"(^|\.)environ$")
_GETENV = re.compile(r"(^|\.)(getenv|environ\.get|environ\.setdefault)$")
# a settings class declaring its variables: TILELANG_CACHE = EnvVar("TILELANG_CACHE", None)
_DECLARED = re.compile(r"(^|\.)(?:Env|Environment)(?:Var|Variable)\w*$|(^|\.)env_var$", re.I)
_SETTINGS_OWNER = re.compile(r"(^|_)envs?$|^environment$|_env$", re.I)
_SETTINGS_NAME = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")
# a project's own reader: _env_get_bool("HELION_STATIC_SHAPES", True), get_bool_env_var("X"), env_flag("X"), and the
# same through functools.partial(_env_get_bool, "X", False) (not a writer: set_env, update_env)
_ENV_HELPER = re.compile(r"^(?!(?:set|unset|update|pop|clear|patch)_)\w*?(?:^|_)env(?:_\w+)?$", re.I)
_WRAPPING_CALLS = frozenset({"int", "bool", "float", "str", "strtobool", "str2bool", "get_bool_env_var", "eval"})
# The process's own settings: a module that sets them (PATH for a toolkit, USER for a cache dir) chooses no kernel.
_PROCESS_VARIABLES = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "USERNAME", "SHELL", "PWD", "TMPDIR", "TEMP", "TMP", "LANG", "PYTHONPATH"}
)
# A variable that names a place (APEX_CACHE_DIR, CUDA_HOME, MODEL_PATH) says where files are, not which kernel runs;
# a PATH names a place only after a noun of one (LIB_FAST_PATH is a code path).
# A timeout, a rendezvous address or a process's rank says how processes meet and wait, not which kernel runs either.
_LOCATION = re.compile(
    r"(?:^|_)(?:DIR|DIRECTORY|HOME|ROOT|FILE|PREFIX)$|"
    r"(?:^|_)(?:TIMEOUT|TIMEOUT_SECS?|TIMEOUT_MS|PORT|ADDR|MASTER_ADDR|RANK|LOCAL_RANK|WORLD_SIZE)$|"
    r"(?:^|_)(?:CACHE|MODEL|LIB|LIBRARY|INSTALL|INCLUDE|DATA|LOG|OUTPUT|CONFIG|BIN|TOOLKIT|SEARCH|CUDA|ROCM)_PATH$"
)
NOT_SET_BY_BISECT = "the bisect's environment does not set it"
# A word that every read or write above needs in the source (environ, getenv, a settings owner such as envs or
# self.env or vllm_env, a declaration's EnvVar): a statement or line without one has no gates, and its tree need
# not be walked.
_ENV_WORD = re.compile(r"environ|getenv|(?<![^\W_])env(?:s?(?:\b|_)|var)")  # searched in the lowered source

EnvGates = dict[str, tuple[str, ...]]  # variable -> sorted "form (in function)" texts, one per read


# (a top-level statement's source, the module's string constants) -> its reads as (variable, "form (in function)"),
# and the constants they use: shared by the two versions of a module, whose unchanged statements read the same
EnvMemo = dict[tuple[str, tuple[tuple[str, str], ...]], tuple[list[tuple[str, str]], frozenset[str]]]


def scan_env_gates(
    tree: ast.Module, source: ParsedSource | None = None, memo: EnvMemo | None = None
) -> tuple[EnvGates, frozenset[str]]:
    """The module's env gates, and the module-level string constants that name a variable some read uses
    (`GPU_ENV = "CCCL_BENCH_GPU"`, then `os.environ.get(GPU_ENV)`: the gate's rows already say what they hold).
    source: the parsed module of tree, where its lines number the tree's; when given, only the top-level
    statements that mention env are walked (their texts from changed_statements.statement_texts), and one whose
    source and constants memo has already met (the other version's) is not walked again."""
    names = _string_constants(tree)
    constants = tuple(sorted(names.items()))
    gates: dict[str, list[str]] = {}
    used: set[str] = set()
    texts = None if source is None else statement_texts(source)
    for index, statement in enumerate(tree.body):
        text = None if texts is None else texts[index]
        if text is not None and not _holds_env_word(text):
            continue  # no word every read needs: its tree need not be walked
        found = memo.get((text, constants)) if memo is not None and text is not None else None
        if found is None:
            numbers = None if source is None else lines_holding(source.lines, statement, _holds_env_word)
            found = _statement_reads(statement, tree, names, numbers)
            if memo is not None and text is not None:
                memo[(text, constants)] = found
        for name, form in found[0]:
            gates.setdefault(name, []).append(form)
        used |= found[1]
    return {name: tuple(sorted(forms)) for name, forms in gates.items()}, frozenset(used)


def _holds_env_word(text: str) -> bool:
    return holds_match(text.lower(), ("env",), _ENV_WORD)


def _statement_reads(
    statement: ast.stmt, tree: ast.Module, names: dict[str, str], numbers: list[int] | None
) -> tuple[list[tuple[str, str]], frozenset[str]]:
    """The statement's reads; numbers: its lines that hold an env word, where known (a subtree on none of them,
    such as a long class's other methods, has no read and is not walked)."""
    parents: dict[ast.AST, ast.AST] = {statement: tree}
    reads: list[tuple[ast.AST, str]] = []
    stack: list[ast.AST] = [statement]
    while stack:  # one walk for the reads and the parents (the order of the reads does not matter: forms are sorted)
        node = stack.pop()
        if (name := _variable(node, names)) is not None and not (name in _PROCESS_VARIABLES and _is_store(node)):
            reads.append((node, name))
        for child in ast.iter_child_nodes(node):
            if numbers is None or on_lines(child, numbers):
                parents[child] = node
                stack.append(child)
    found: list[tuple[str, str]] = []
    used: set[str] = set()
    for node, name in reads:
        assert isinstance(node, ast.expr)
        form = short_text(_write(node, parents) or ast.unparse(_widen(node, parents)))
        found.append((name, f"{form} (in {_function_of(node, parents)})"))
        used.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in names)
    return found, frozenset(used)


def names_a_location(variable: str) -> bool:
    """CUDA_HOME, TRITON_CACHE_DIR, MODEL_PATH: where files are; NCCL_TIMEOUT, MASTER_PORT, LOCAL_RANK: how
    processes meet; neither is a gate of a kernel choice."""
    return _LOCATION.search(variable) is not None


def diff_env_gates(path: str, before: EnvGates | None, after: EnvGates | None) -> list[Finding]:
    """A row per variable whose reads differ, but for variables that name a place (names_a_location)."""
    old, new = before or {}, after or {}
    rows: list[Finding] = []
    for name in sorted(set(old) | set(new)):
        if names_a_location(name):
            continue
        was, now = frozenset(old.get(name, ())), frozenset(new.get(name, ()))
        if was == now or _moved(old.get(name, ()), new.get(name, ())):
            continue
        how = "added" if not was else "removed" if not now else "changed"
        before_text = "; ".join(sorted(was - now or was)) if was else None  # all of a side that only gained reads
        after_text = "; ".join(sorted(now - was or now)) if now else None
        rows.append(Finding(FindingKind.ENV_GATE, path, name, "", before_text, after_text, None, f"gate {how}"))
    return rows


def _moved(before: tuple[str, ...], after: tuple[str, ...]) -> bool:
    """The same reads in the same forms, only in other functions: the gate means what it meant."""
    return bool(before) and sorted(_form(f) for f in before) == sorted(_form(f) for f in after)


def _form(read: str) -> str:
    return read.rsplit(" (in ", 1)[0]


def annotate_env_gates(findings: list[Finding], env: Mapping[str, str]) -> list[Finding]:
    """Say, on each env-gate row, whether the bisect's own environment (spec.env) sets the variable."""
    out: list[Finding] = []
    for finding in findings:
        if finding.kind is FindingKind.ENV_GATE and "bisect's environment" not in finding.detail:
            value = env.get(finding.name)
            said = f"the bisect's environment sets {finding.name}={value}" if value is not None else NOT_SET_BY_BISECT
            finding = dataclasses.replace(finding, detail=f"{finding.detail}; {said}")
        out.append(finding)
    return out


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "text" assignments: the variable names a module keeps in constants."""
    found: dict[str, str] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], _string(statement.value, {})
            if isinstance(target, ast.Name) and value is not None:
                found[target.id] = value
    return found


def _variable(node: ast.AST, names: dict[str, str]) -> str | None:
    """The variable a node reads, when it is an environment read."""
    if isinstance(node, ast.Call) and _GETENV.search(_dotted(node.func)) and node.args:
        return _string(node.args[0], names)
    if isinstance(node, ast.Call) and (helped := _helper_read(node, names)) is not None:
        return helped
    if isinstance(node, ast.Call) and _DECLARED.search(_dotted(node.func)) and node.args:
        declared = _string(node.args[0], names)
        return declared if declared and _SETTINGS_NAME.match(declared) else None
    if isinstance(node, ast.Subscript) and _ENVIRON.search(
        _dotted(node.value)
    ):  # a read, or a write (os.environ[X] = v)
        return _string(node.slice, names) if isinstance(node.ctx, ast.Load | ast.Store) else None
    if isinstance(node, ast.Compare) and _membership(node) and _ENVIRON.search(_dotted(node.comparators[0])):
        return _string(node.left, names)
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _settings_read(node):
        return node.attr
    return None


def _helper_read(call: ast.Call, names: dict[str, str]) -> str | None:
    """The upper-case variable a project's env-reading helper is called with, directly or through partial."""
    args = call.args
    if _dotted(call.func).rsplit(".", 1)[-1] == "partial" and args:
        args = args[1:] if _ENV_HELPER.match(_dotted(args[0]).rsplit(".", 1)[-1]) else []
    elif not _ENV_HELPER.match(_dotted(call.func).rsplit(".", 1)[-1]):
        return None
    variable = _string(args[0], names) if args else None
    return variable if variable and _SETTINGS_NAME.match(variable) else None


def _write(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str | None:
    """`os.environ["X"] = "ieee"`: the module sets what the stack will read (the condition around it, if any, is
    a branch condition row of its own)."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)):
        return None
    assignment = parents.get(node)
    return ast.unparse(assignment) if isinstance(assignment, ast.Assign) else f"{ast.unparse(node)} = ..."


def _is_store(node: ast.AST) -> bool:
    return isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)


def _membership(node: ast.Compare) -> bool:
    return len(node.ops) == 1 and isinstance(node.ops[0], ast.In | ast.NotIn)


def _settings_read(node: ast.Attribute) -> bool:
    return bool(_SETTINGS_NAME.match(node.attr) and _SETTINGS_OWNER.search(_dotted(node.value)))


def _widen(node: ast.expr, parents: dict[ast.AST, ast.AST]) -> ast.expr:
    """The read with what decides its meaning around it: int()/bool() wrappers, .lower(), a comparison, not."""
    current = node
    for _ in range(4):
        parent = parents.get(current)
        if isinstance(parent, ast.Compare | ast.UnaryOp) or _wrapping(parent, current) or _defaulted(parent, current):
            current = parent  # type: ignore[assignment]  # both branches narrowed parent to an expr
        elif isinstance(parent, ast.Attribute):
            current = parents[parent]  # type: ignore[assignment]  # os.environ.get(...).lower()
        else:
            break
    return current


def _defaulted(parent: ast.AST | None, node: ast.expr) -> bool:
    """os.getenv("X") or "4": the default is part of the gate (not `"X" in os.environ or other`: a test, no value)."""
    if isinstance(node, ast.Compare | ast.UnaryOp):
        return False
    return isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or) and parent.values[0] is node


def _wrapping(parent: ast.AST | None, node: ast.expr) -> bool:
    return isinstance(parent, ast.Call) and node in parent.args and _dotted(parent.func) in _WRAPPING_CALLS


def _function_of(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    names: list[str] = []
    current: ast.AST | None = parents.get(node)
    while current is not None:
        if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(current.name)
        current = parents.get(current)
    return ".".join(reversed(names)) or "<module>"


def _dotted(expr: ast.expr) -> str:
    return ".".join(reversed(list(_chain(expr))))


def _chain(expr: ast.expr) -> Iterator[str]:
    while isinstance(expr, ast.Attribute):
        yield expr.attr
        expr = expr.value
    if isinstance(expr, ast.Name):
        yield expr.id


def _string(expr: ast.expr, names: dict[str, str]) -> str | None:
    """A literal variable name, or a module-level constant holding one."""
    if isinstance(expr, ast.Name):
        return names.get(expr.id)
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None
