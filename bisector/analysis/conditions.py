"""What a dispatch condition is about (env var, arch, dtype, shape, a backend flag, a library's version, a settings or
options object), and the names that hold a condition.

A condition stored in a name is a gate: after `tuned = get_arch() == "gfx950"` (module level or in a function),
`if tuned:` and `... if tuned else ...` are arch conditions, and the assignment itself is a condition of the
module or function that makes it, so a changed definition is a changed condition. The arch kept in names
(`major, minor = get_device_capability()`) is a gate too: where the arch comes from is part of the decision. Arch,
dtype and shape make rows of their own here; an env read kept in a name is an env gate of env_gates.py, which shows
the read and its form, and a condition that reads the name is an env condition.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass

from bisector.analysis.code_shape import last_name, module_statements
from bisector.analysis.findings import short_text

# Kernel implementations a flag can switch between (`use_triton`, `disable_exllama`, `enable_fused_moe`)
BACKEND_WORDS = (
    r"triton\w*|exllama\w*|marlin\w*|cuda\w*|flash\w*|fused\w*|fusion|kernels?|cutlass|cublas\w*|cudnn|"
    r"tensor_cores?|tma|wgmma|fp8\w*|sdpa|xformers|ipex|rocm|hip|custom_\w+|native_\w+|graphs?|mma|multimem\w*"
)
BACKEND_FLAG = rf"(?:use|disable|enable|force|prefer|allow)_(?:\w+_)?(?:{BACKEND_WORDS})"

# A read of a settings or options object whose value picks what gets compiled or run: `options["enable_backward"]`
# (per module), `env.settings.static_shapes`, `warp.config.mode`, `config.use_tma`, `torch.backends.cudnn.enabled`.
# A kernel config's own fields (`config.num_warps`) are launch parameters, and a bare `config.x` is too common to
# mean a setting: only a setting named as a switch, or a config object reached through a module, counts.
OPTION_READ = re.compile(
    r"\b(?:options|opts)\s*(?:\[|\.get\()|\bsettings\.[a-z_]\w*|\btorch\.backends\.\w+|"
    r"\b\w+\.config\.[a-z_]\w*|\b(?:config|cfg)\.(?:use|enable|disable|allow|force|prefer)_\w+"
)

# Searched only for whether they match: no pattern starts or ends with \w* (`\w*sm_?\d{2,3}\w*` matches where
# `sm_?\d{2,3}` does, and retries each word's letters at every one of them).
_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("env", re.compile(r"\benviron\b|\bgetenv\b|\benvs?\.[A-Z_]|\benv_flag|_env\(|\bENV_", re.I)),
    (
        "arch",
        re.compile(
            r"is_hip|is_cuda|is_rocm|is_xpu|is_cpu\b|torch\.version\.(hip|cuda)|capabilit|device_name|device_kind|"
            r"\barch\b|_arch\b|sm_?\d{2,3}|is_hopper|is_blackwell|is_ampere|gfx\d|[\"']gfx[\"']|current_platform|"
            r"is_navi|is_mi\d|cuda_version|version\.cuda|bare_metal_version|triton\.__version__|has_triton|"
            r"infer_device|device[._]type|\bxpu\b|\bnpu\b|\bmajor\b|\bminor\b|is_[cr]dna\d*|"
            r"(?:nv|cuda|gpu|device|sm|compute)_?cap\b|\bcc\b|\bsm_?(?:cnt|count)s?\b|\bnum_sms\b|"
            r"multi_processor_count|"
            r"\bsys\.platform\b|\bplatform\.(?:system|machine)\(|\b(?:cuda|xpu|mps|npu|hip|mlu|musa)\.is_available\(|"
            # the GPU's instruction set: isa, isaVersion, CurrentISA (not disable, isAvailable)
            r"(?-i:(?<![A-Za-z])isa(?![a-z])|(?<![A-Z])ISA(?![A-Z])|(?<=[a-z])Isa(?![a-z]))",
            re.I,
        ),
    ),
    (
        "dtype",  # torch's dtype names are lower case: Float8Config is a class, not a dtype
        re.compile(
            r"dtype|element_size|itemsize|float8_|fp8|fp16|bf16|bfloat16|float16|float32|\bu?int[48]\b|fp4|"
            r"is_floating_point"
        ),
    ),
    ("shape", re.compile(r"\.shape\b|\.size\(|numel|\.ndim\b|\.dim\(\)|stride\(", re.I)),
    ("backend", re.compile(rf"\b{BACKEND_FLAG}\b")),
    ("version", re.compile(r"_version\b|version\.parse|\b(?:Pkg)?Version\(|__version__|\bversion\b", re.I)),
    ("option", OPTION_READ),
)
_SHAPE_NAMES = re.compile(
    r"^(m|n|k|b|h|d|s|t|bs|bt|size|batch\w*|seq\w*|num_\w+|n_\w+|head\w*|\w*_size|\w*_len|\w*_dim|\w*tokens\w*|"
    r"\w*features)$",
    re.I,
)
_TILE = re.compile(r"\bBLOCK_\w+|\bblock_size\w*|\bnum_warps\b|\bnum_stages\b|\btile_\w+", re.I)
_THRESHOLD_NAMES = re.compile(r"^(MAX|MIN)_|_(THRESHOLD|LIMIT|MAX|MIN)$")


def condition_category(test: ast.expr, gates: Mapping[str, Gate] | None = None, text: str | None = None) -> str:
    """What a condition is about: env var, arch, dtype, shape, backend flag, version or a settings / options read
    (in that order of precedence), or the
    category of a gate it reads; "" otherwise. text: the condition's source when the caller has it."""
    text = ast.unparse(test) if text is None else text
    for name, pattern in _CATEGORIES:
        if pattern.search(text):
            return name
    for gate in gates_read(test, gates):
        return gate.category
    return "shape" if _is_threshold(test) else ""


def _is_threshold(test: ast.expr) -> bool:
    """A comparison of a size-like name (M, batch_size, num_tokens, ...) with a number, a threshold constant
    (MAX_BATCH, SPLIT_THRESHOLD, ...) or a tile parameter (config.kwargs["BLOCK_M"] <= M in a config pruner)."""
    for node in ast.walk(test):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        has_number = any(_number(s) or _numbers(s) for s in sides)  # M <= 64, K not in {16, 32, 64}
        has_threshold = any(_THRESHOLD_NAMES.search(last_name(s)) for s in sides)
        named = any(_SHAPE_NAMES.match(last_name(s)) for s in sides)
        if named and (has_number or any(_TILE.search(ast.unparse(s)) for s in sides)):  # a tile: text made last
            return True
        if has_threshold and len(sides) == 2:
            return True
    return False


def _number(expr: ast.expr) -> bool:
    """A number, or arithmetic on numbers (`0x7fffffff // 1024`)."""
    if isinstance(expr, ast.BinOp):
        return _number(expr.left) and _number(expr.right)
    return isinstance(expr, ast.Constant) and type(expr.value) in (int, float)


def _numbers(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Set | ast.Tuple | ast.List) and bool(expr.elts) and all(map(_number, expr.elts))


# calls that ask for the arch; not for the device's name, which keys caches, logs and benchmark results as often
_ARCH_QUERY = re.compile(r"capabilit|(^|_)arch($|_)|gfx|sm_version", re.I)
_CONDITION_CALL = re.compile(r"^(is|has|use|uses|supports?|should|can|enable|enabled)_\w+$")


@dataclass(frozen=True)
class Gate:
    category: str  # "arch", "dtype", "shape", "env"
    text: str  # "tuned = arch_info.get_arch() == 'gfx950'"


def gates_read(test: ast.expr, gates: Mapping[str, Gate] | None) -> list[Gate]:
    """The gates a condition reads, in order, once each."""
    if not gates:
        return []
    found: dict[str, Gate] = {}
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in gates:
            found.setdefault(node.id, gates[node.id])
    return list(found.values())


def stored_condition(statement: ast.stmt, gates: Mapping[str, Gate]) -> tuple[list[str], Gate] | None:
    """(names, gate) when the statement keeps a dispatch condition in a name (a comparison, and / or / not, or a
    call of an is_* / has_* / use_* / supports_* predicate, about the arch, a dtype, a shape or an env variable: an
    env gate's own row is env_gates.py's, but `if ENABLE_CACHE:` is an env condition), or keeps the arch
    itself in names (`major, minor = get_device_capability()`, `arch = get_arch()`: where the arch comes from)."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target, value = statement.targets[0], statement.value
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        target, value = statement.target, statement.value
    else:
        return None
    elements = target.elts if isinstance(target, ast.Tuple) else [target]
    names = [_stored_name(e) for e in elements]
    if not names or not all(names):
        return None
    if _is_arch_query(value):
        category = "arch"
    elif len(names) == 1 and _is_condition(value):
        category = condition_category(value, gates)
    else:
        return None
    if category in ("arch", "dtype", "shape", "env"):
        return names, Gate(category, short_text(f"{', '.join(names)} = {ast.unparse(value)}"))
    return None


def _stored_name(target: ast.expr) -> str:
    """`x` or `self.x` (an instance attribute keeps a condition as a local does: `self.can_use_nt = dtype == f16`),
    or a named entry of a dict (`caps["HasFp8"] = arch >= (9, 4)`: a table of what the device can do)."""
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return f"self.{target.attr}"
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name | ast.Attribute):
        key = target.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return ast.unparse(target)
    return ""


def returned_predicates(value: ast.expr, function: str) -> list[ast.expr]:
    """The conditions a return statement hands its caller, outside dunder methods (__eq__ compares objects, it
    chooses nothing): `return capability == (8, 0)`, or a comparison inside a returned tuple (`return (x.size <=
    0x7fffffff, contiguous_size)`: whether the caller may take a path, and what it takes it with)."""
    if function.rsplit(".", 1)[-1].startswith("__"):
        return []
    if isinstance(value, ast.Compare | ast.BoolOp):
        return [value]
    if isinstance(value, ast.Tuple):
        return [element for element in value.elts if isinstance(element, ast.Compare | ast.BoolOp)]
    return []


def without_none_checks(test: ast.BoolOp) -> str:
    """An and / or's text without its `x is None` / `x is not None` operands (nested ones of the same operator
    flattened): `v is not None and v >= (12, 3)` reads as `v >= (12, 3)`, since a guard against a missing value
    changes no choice made when the value is there."""
    operands = _flattened(test)
    kept = [o for o in operands if not none_check(o)] or operands
    return ast.unparse(kept[0] if len(kept) == 1 else ast.BoolOp(test.op, kept))


def _flattened(test: ast.BoolOp) -> list[ast.expr]:
    out: list[ast.expr] = []
    for value in test.values:
        out.extend(_flattened(value) if isinstance(value, ast.BoolOp) and type(value.op) is type(test.op) else [value])
    return out


def none_check(node: ast.AST) -> bool:
    """`x is None` or `x is not None`: a guard against a missing value."""
    return (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.Is | ast.IsNot)
        and isinstance(node.comparators[0], ast.Constant)
        and node.comparators[0].value is None
    )


def walrus_gate(node: ast.NamedExpr) -> tuple[str, Gate] | None:
    """The arch kept in a name inside an expression: `... if (ver := int(target.arch[3:])) >= 80 else ...`."""
    if _is_arch_query(node.value) or condition_category(node.value) == "arch":
        return node.target.id, Gate("arch", short_text(f"{node.target.id} = {ast.unparse(node.value)}"))
    return None


def module_gates(body: list[ast.stmt]) -> dict[str, Gate]:
    """The gates a module's own statements make (under module-level if / try / with too), for the functions that
    read them wherever they are defined."""
    gates: dict[str, Gate] = {}
    for statement in module_statements(body):
        stored = stored_condition(statement, gates)
        if stored is not None:
            gates.update(dict.fromkeys(stored[0], stored[1]))
    return gates


def _is_arch_query(value: ast.expr) -> bool:
    """A call that asks for the arch: get_device_capability(), get_compute_capability(dev)[0], get_arch(), ..."""
    while isinstance(value, ast.Subscript):
        value = value.value
    return isinstance(value, ast.Call) and bool(_ARCH_QUERY.search(last_name(value.func)))


def _is_condition(value: ast.expr) -> bool:
    """A comparison, a not, a predicate call, or and / or of names and at least one of those (`x or "2"` is a
    default, not a condition)."""
    if isinstance(value, ast.Compare) or (isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)):
        return True
    if isinstance(value, ast.BoolOp):
        operands = value.values
        plain = all(_is_condition(v) or isinstance(v, ast.Name | ast.Attribute) for v in operands)
        return plain and any(_is_condition(v) for v in operands)
    return isinstance(value, ast.Call) and bool(_CONDITION_CALL.match(last_name(value.func)))


# Names that hold which implementation runs: backend = "tir", self.kernel = fast_gemm, use_ipex = True (useIpex in
# camelCase code: kernel generators); and, given a string, which named config it runs with: config_name = "mha_128".
_CHOICE_NAMES = re.compile(
    r"^(\w*_)?(backend|kernel|impl|implementation|algo|algorithm|engine)$|^use_\w+$|^(?-i:use[A-Z])\w*$", re.I
)
_CONFIG_NAMES = re.compile(r"config|cfg", re.I)


def chooses_implementation(statement: ast.If) -> bool:
    """An if whose branches set the backend, kernel or implementation to a constant or a named function (`if
    source_format in ["nf"]: backend = "tir"`), or name the config to run (`if rows > 64: config = "block_128"`):
    whatever it tests, it is a dispatch condition."""
    for branch in (statement.body, statement.orelse):
        for node in branch:
            if not isinstance(node, ast.Assign | ast.AnnAssign):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            chosen = isinstance(node.value, ast.Constant | ast.Name | ast.Attribute)
            if chosen and any(_CHOICE_NAMES.match(last_name(target)) for target in targets):
                return True
            named = isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            if named and any(_CONFIG_NAMES.search(last_name(target)) for target in targets):
                return True
    return False


def passed_condition(keyword: str, value: ast.expr) -> bool:
    """A comparison passed to a keyword that switches the callee (`use_fp4=precision == "fp4"`, `is_causal=...`)."""
    if not isinstance(value, ast.Compare):
        return False
    return bool(_CONDITION_CALL.match(keyword)) or keyword.startswith(("use_", "enable_"))
