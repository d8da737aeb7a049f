"""Dispatch inside function bodies, read with ast: kernel launch sites and the branch conditions that choose.

    kernel[grid](x, y, num_warps=8, BLOCK_M=64)     a Triton launch: its grid and keyword arguments
    torch.ops.my_lib.gemm(a, b, 128)               a torch custom-op launch: its arguments
    if is_hip() / capability >= (9, 0) / x.dtype == torch.float8_e4m3fn / M <= 64 / os.environ.get(...)
                                                   a branch condition on the arch, the dtype, a shape, an env var

A keyword argument passed as a local name (num_warps=num_warps) shows the assignments to that name in the
function, so a changed heuristic before the launch is a changed launch parameter. Each launch site carries
the if-conditions that lead to it. diff_sites compares two scans of one module.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from bisector.analysis.findings import Finding, FindingKind

MAX_TEXT = 160
_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("env", re.compile(r"\benviron\b|\bgetenv\b|\benvs?\.[A-Z_]|\benv_flag|_env\(|\bENV_", re.I)),
    (
        "arch",
        re.compile(
            r"is_hip|is_cuda|is_rocm|is_xpu|is_cpu\b|torch\.version\.(hip|cuda)|capabilit|device_name|"
            r"\barch\b|_arch\b|\w*sm_?\d{2,3}\w*|is_hopper|is_blackwell|is_ampere|gfx\d|current_platform|"
            r"is_navi|is_mi\d|cuda_version|version\.cuda|bare_metal_version|triton\.__version__|has_triton|"
            r"infer_device|device\.type|\bxpu\b|\bnpu\b|\bmajor\b|\bminor\b",
            re.I,
        ),
    ),
    (
        "dtype",  # torch's dtype names are lower case: Float8Config is a class, not a dtype
        re.compile(
            r"dtype|element_size|itemsize|float8_|fp8|fp16|bf16|bfloat16|float16|float32|\bu?int[48]\b|"
            r"is_floating_point"
        ),
    ),
    ("shape", re.compile(r"\.shape\b|\.size\(|numel|\.ndim\b|\.dim\(\)|stride\(", re.I)),
)
_NOT_KERNELS = re.compile(r"cache|dict|registry|table|_map\b|mapping|dispatch", re.I)
_SHAPE_NAMES = re.compile(
    r"^(m|n|k|b|h|d|s|t|bs|bt|batch\w*|seq\w*|num_\w+|n_\w+|head\w*|\w*_size|\w*_len|\w*_dim|\w*tokens\w*)$",
    re.I,
)
_THRESHOLD_NAMES = re.compile(r"^(MAX|MIN)_|_(THRESHOLD|LIMIT|MAX|MIN)$")


@dataclass(frozen=True)
class LaunchSite:
    function: str  # enclosing qualified name ("<module>" at module level)
    kernel: str  # "_fwd_kernel[grid]", "torch.ops.my_lib.gemm"
    occurrence: int  # the n-th launch of this kernel in this function
    arguments: dict[str, str]  # "grid", "num_warps", "arg0" -> value text
    condition: str  # the if-conditions leading to the site, "and"-joined ("" when unconditional)
    line: int

    @property
    def identity(self) -> tuple[str, str, int]:
        return (self.function, self.kernel, self.occurrence)


@dataclass(frozen=True)
class Branch:
    function: str
    test: str
    category: str  # "arch", "dtype", "shape", "env", or "" (not a dispatch condition)
    line: int


@dataclass
class SiteScan:
    launches: list[LaunchSite] = field(default_factory=list)
    branches: dict[str, list[Branch]] = field(default_factory=dict)  # function -> its branches in order


def condition_category(test: ast.expr) -> str:
    """What a condition is about: env var, arch, dtype or shape (in that order of precedence); "" otherwise."""
    text = ast.unparse(test)
    for name, pattern in _CATEGORIES:
        if pattern.search(text):
            return name
    return "shape" if _is_threshold(test) else ""


def _is_threshold(test: ast.expr) -> bool:
    """A comparison of a size-like name (M, batch_size, num_tokens, ...) with a number or a threshold constant
    (MAX_BATCH, SPLIT_THRESHOLD, ...)."""
    for node in ast.walk(test):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        has_number = any(isinstance(s, ast.Constant) and type(s.value) in (int, float) for s in sides)
        has_threshold = any(_THRESHOLD_NAMES.search(_last_name(s)) for s in sides)
        named = any(_SHAPE_NAMES.match(_last_name(s)) for s in sides)
        if (has_number and named) or (has_threshold and len(sides) == 2):
            return True
    return False


def _last_name(expr: ast.expr) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return ""


def scan_sites(tree: ast.Module) -> SiteScan:
    scan = SiteScan()
    _Walker(scan).body(tree.body, "", "<module>", ())
    return scan


class _Walker:
    def __init__(self, scan: SiteScan) -> None:
        self.scan = scan
        self.counts: dict[tuple[str, str], int] = {}
        self.assigned: dict[str, dict[str, list[str]]] = {}  # function -> its local assignments

    def body(self, statements: list[ast.stmt], prefix: str, function: str, conditions: tuple[str, ...]) -> None:
        for statement in statements:
            self.statement(statement, prefix, function, conditions)

    def statement(self, node: ast.stmt, prefix: str, function: str, conditions: tuple[str, ...]) -> None:
        if isinstance(node, ast.ClassDef):
            self.body(node.body, f"{prefix}{node.name}.", function, ())
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + node.name
            self.scan.branches.setdefault(name, [])
            self.assigned[name] = _assignments(node)
            self.body(node.body, f"{name}.<locals>.", name, ())
        elif isinstance(node, ast.If):
            self._branch(function, node.test)
            test = _short(ast.unparse(node.test))
            self.body(node.body, prefix, function, (*conditions, test))
            self.body(node.orelse, prefix, function, (*conditions, f"not ({test})"))
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    self.statement(child, prefix, function, conditions)
                elif isinstance(child, ast.expr):
                    self.expression(child, function, conditions)

    def expression(self, node: ast.expr, function: str, conditions: tuple[str, ...]) -> None:
        for child in ast.walk(node):
            if isinstance(child, ast.IfExp):
                self._branch(function, child.test)
            elif isinstance(child, ast.Call):
                self._launch(child, function, conditions)

    def _branch(self, function: str, test: ast.expr) -> None:
        category = condition_category(test)
        branch = Branch(function, _short(ast.unparse(test)), category, test.lineno)
        self.scan.branches.setdefault(function, []).append(branch)

    def _launch(self, call: ast.Call, function: str, conditions: tuple[str, ...]) -> None:
        arguments: dict[str, str] = {}
        if isinstance(call.func, ast.Subscript) and _is_kernel_launch(call.func):  # kernel[grid](...)
            kernel = f"{ast.unparse(call.func.value)}[...]"
            arguments["grid"] = _short(ast.unparse(call.func.slice))
            arguments.update((kw.arg or "**", _short(ast.unparse(kw.value))) for kw in call.keywords)
        elif ast.unparse(call.func).startswith("torch.ops."):
            kernel = ast.unparse(call.func).removesuffix(".default")
            arguments.update((f"arg{i}", _short(ast.unparse(a))) for i, a in enumerate(call.args))
            arguments.update((kw.arg or "**", _short(ast.unparse(kw.value))) for kw in call.keywords)
        else:
            return
        key = (function, kernel)
        occurrence = self.counts.get(key, 0)
        self.counts[key] = occurrence + 1
        condition = " and ".join(conditions)
        arguments = _resolved(arguments, self.assigned.get(function, {}))
        self.scan.launches.append(LaunchSite(function, kernel, occurrence, arguments, condition, call.lineno))


def _is_kernel_launch(target: ast.Subscript) -> bool:
    """kernel[grid](...) rather than a call through a dict or cache (cache[key](...)): the grid is a tuple, a
    lambda, a call (triton.cdiv), or a name that says grid."""
    if _NOT_KERNELS.search(ast.unparse(target.value)):
        return False
    grid = target.slice
    if isinstance(grid, ast.Tuple | ast.Lambda | ast.Call | ast.List):
        return True
    return isinstance(grid, ast.Name | ast.Attribute) and "grid" in ast.unparse(grid).lower()


def _resolved(arguments: dict[str, str], assigned: dict[str, list[str]]) -> dict[str, str]:
    """Arguments passed as a local name, shown with what the function assigns to that name."""
    out: dict[str, str] = {}
    for name, value in arguments.items():
        values = assigned.get(value) if value.isidentifier() else None
        out[name] = f"{value} (= {' | '.join(values)})" if values else value
    return out


def _assignments(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, list[str]]:
    """name -> the expressions assigned to it in the function's own body (not nested functions), in order."""
    found: dict[str, list[str]] = {}
    for node in _own_nodes(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(_short(ast.unparse(node.value)))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name) and node.value:
            operator = "=" if isinstance(node, ast.AnnAssign) else f"{_OPS.get(type(node.op), '?')}="
            text = _short(ast.unparse(node.value))
            found.setdefault(node.target.id, []).append(text if operator == "=" else f"{operator} {text}")
    return found


_OPS: dict[type[ast.operator], str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/"}


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                stack.append(child)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def diff_sites(path: str, before: SiteScan | None, after: SiteScan | None) -> list[Finding]:
    """Rows for launch arguments (and launch conditions) that differ, and for dispatch conditions (arch, dtype,
    shape, env) added, removed or changed in a function."""
    old, new = before or SiteScan(), after or SiteScan()
    return [*_launch_rows(path, old.launches, new.launches), *_branch_rows(path, old.branches, new.branches)]


def _launch_rows(path: str, old: list[LaunchSite], new: list[LaunchSite]) -> list[Finding]:
    rows: list[Finding] = []
    for was, now in _pair_launches(old, new):
        site = now or was
        assert site is not None
        detail = f"in {site.function}" + (f"; when {site.condition}" if site.condition else "")
        if was is None or now is None:
            rows.append(_launch(path, site, "launch", _call_text(was), _call_text(now), detail))
            continue
        for name in [*was.arguments, *(n for n in now.arguments if n not in was.arguments)]:
            if was.arguments.get(name) != now.arguments.get(name):
                rows.append(_launch(path, site, name, was.arguments.get(name), now.arguments.get(name), detail))
        if was.condition != now.condition:
            rows.append(_launch(path, site, "condition", was.condition or "always", now.condition or "always", detail))
    return rows


def _call_text(site: LaunchSite | None) -> str | None:
    if site is None:
        return None
    return ", ".join(f"{name}={value}" for name, value in site.arguments.items()) or "()"


def _pair_launches(old: list[LaunchSite], new: list[LaunchSite]) -> list[tuple[LaunchSite | None, LaunchSite | None]]:
    """Sites matched by (function, kernel, occurrence), then leftovers of one kernel in order (a renamed caller)."""
    by_identity = {site.identity: site for site in old}
    pairs: list[tuple[LaunchSite | None, LaunchSite | None]] = []
    unmatched_new: list[LaunchSite] = []
    for site in new:
        match = by_identity.pop(site.identity, None)
        if match is None:
            unmatched_new.append(site)
        else:
            pairs.append((match, site))
    leftovers = list(by_identity.values())
    for site in unmatched_new:
        match = next((o for o in leftovers if o.kernel == site.kernel), None)
        if match is not None:
            leftovers.remove(match)
        pairs.append((match, site))
    pairs.extend((site, None) for site in leftovers)
    return pairs


def _launch(path: str, site: LaunchSite, key: str, before: str | None, after: str | None, detail: str) -> Finding:
    return Finding(FindingKind.LAUNCH_PARAM, path, site.kernel, key, before, after, site.line, detail)


def _branch_rows(path: str, old: dict[str, list[Branch]], new: dict[str, list[Branch]]) -> list[Finding]:
    rows: list[Finding] = []
    for function in [*old, *(f for f in new if f not in old)]:
        was, now = old.get(function, []), new.get(function, [])
        matcher = difflib.SequenceMatcher(a=[b.test for b in was], b=[b.test for b in now], autojunk=False)
        before_tests, after_tests = [b.test for b in was], [b.test for b in now]
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            # a condition that only moved within the function (same text on both sides) is not a change
            removed = [b for b in was[i1:i2] if before_tests.count(b.test) > after_tests.count(b.test)]
            added = [b for b in now[j1:j2] if after_tests.count(b.test) > before_tests.count(b.test)]
            for index in range(max(len(removed), len(added))):
                rows.extend(_branch(path, function, _at(removed, index), _at(added, index)))
    return rows


def _at(branches: list[Branch], index: int) -> Branch | None:
    return branches[index] if index < len(branches) else None


def _branch(path: str, function: str, was: Branch | None, now: Branch | None) -> list[Finding]:
    category = (now.category if now else "") or (was.category if was else "")
    if not category:
        return []
    line = now.line if now else was.line if was else None
    before, after = (was.test if was else None), (now.test if now else None)
    return [Finding(FindingKind.BRANCH_CONDITION, path, function, f"{category} condition", before, after, line)]
