"""Calls that launch a kernel: kernel[grid](...), torch.ops.*, and plain calls by their keywords.

kernel[grid](x, BLOCK=64)                               a Triton launch (not cache[key](...)), with the positional
                                                        arguments that give its tiling (x, n, block_size)
gemm_sm90(a, b, tile_M=128, cluster_N=2)               tile or launch keywords (a CuTe DSL / JIT entry)
sageattn_fp8_cuda(q, k, v, pv_accum_dtype="fp32+fp16")  a string naming the precision, backend or kernel that
                                                        a kernel wrapper runs with
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from bisector.analysis.findings import short_text

_NOT_KERNELS = re.compile(r"cache|dict|registry|table|_map\b|mapping|dispatch", re.I)
# Keywords that choose a kernel's tiling or launch shape.
_TILE_KEYWORD = re.compile(
    r"^(?i:(tile|block|cluster)_?[mnk]|num_(warps|stages|ctas))$|^(BLOCK|TILE|CLUSTER)_[A-Z0-9_]+$"
)
# Keywords that, given a string, choose the variant a wrapper runs: pv_accum_dtype="fp32", backend="triton".
# Names of positional launch arguments that give a tiling: block_size, x_block_size, BLOCK_SIZE_M, num_warps.
_POSITIONAL_TILE = re.compile(r"block_?size|^block_?[mnk]$|^BLOCK_|^num_(warps|stages)$|^tile_", re.I)
_STRIDE = re.compile(r"(^|_)strides?(_|$)", re.I)
_CHOICE_KEYWORD = re.compile(r"^(\w+_)?(dtype|precision|backend|impl|kernel|algo|algorithm)$", re.I)


def launch_keywords(call: ast.Call) -> dict[str, str]:
    """A launch's keyword arguments (`**` for a `**kwargs`), less strides (`stride_row_out=out.stride(-2)`,
    `act_inputs_m_stride=...`): where the kernel indexes, not how it is launched or tiled."""
    return {
        keyword.arg or "**": short_text(ast.unparse(keyword.value))
        for keyword in call.keywords
        if not (keyword.arg and _STRIDE.search(keyword.arg))
    }


def tile_positionals(arguments: list[ast.expr]) -> dict[str, str]:
    """A launch's positional arguments that give its tiling (`kernel[grid](x, y, size, block_size)`, `...,
    util.block_size(n, x.element_size())`), keyed by the name they pass ("positional block_size"), not by their
    place, which moves when a pointer is added before them."""
    found: dict[str, str] = {}
    for argument in arguments:
        target = argument.func if isinstance(argument, ast.Call) else argument
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
        if name and _POSITIONAL_TILE.search(name):
            key = f"positional {name}"
            found[key if key not in found else f"{key} #{len(found) + 1}"] = short_text(ast.unparse(argument))
    return found


def launch_call(call: ast.Call) -> bool:
    """A plain call passing tile or launch keywords, or a string to a keyword that chooses the precision, backend
    or kernel; not a config object (triton.Config(..., num_warps=4)), a call inside a kernel (tl.range(...,
    num_stages=3)), or a tensor factory (torch.empty(..., dtype=...): a string dtype there is no choice of kernel)."""
    if not any(keyword.arg for keyword in call.keywords):
        return False
    callee = ast.unparse(call.func)
    if callee.rsplit(".", 1)[-1].endswith(("Config", "config", "dict")) or callee.startswith(("tl.", "triton.")):
        return False
    for keyword in call.keywords:
        if not keyword.arg:
            continue
        if _TILE_KEYWORD.match(keyword.arg):
            return True
        chosen = isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str)
        if chosen and _CHOICE_KEYWORD.match(keyword.arg) and not callee.startswith(("torch.", "np.", "numpy.")):
            return True
    return False


def is_kernel_launch(target: ast.Subscript, kernels: frozenset[str]) -> bool:
    """kernel[grid](...) rather than a call through a dict or cache (cache[key](...)): the grid is a tuple, a
    lambda, a call (triton.cdiv), or a name that says grid. A decorated function of the module (@triton.jit) is a
    kernel whatever its name says (_fwd_kernel_no_prompt_cache)."""
    name = ast.unparse(target.value)
    if _NOT_KERNELS.search(name) and name not in kernels:
        return False
    grid = target.slice
    if isinstance(grid, ast.Tuple | ast.Lambda | ast.Call | ast.List):
        return True
    return isinstance(grid, ast.Name | ast.Attribute) and "grid" in ast.unparse(grid).lower()


def launch_test(kernels: frozenset[str]) -> Callable[[ast.Call], bool]:
    """Whether a call is a launch as scan_sites reads one; kernels: the module's decorated functions."""

    def launches(call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Subscript):
            return is_kernel_launch(func, kernels)
        return torch_op(func) or launch_call(call)

    return launches


def torch_op(func: ast.expr) -> bool:
    """The callee's text starts with torch.ops. (its leftmost name, read first, is torch)."""
    root = func
    while isinstance(root, ast.Attribute | ast.Subscript | ast.Call):
        root = root.func if isinstance(root, ast.Call) else root.value
    return isinstance(root, ast.Name) and root.id == "torch" and ast.unparse(func).startswith("torch.ops.")


def decorated(module: ast.Module) -> frozenset[str]:
    return frozenset(
        node.name
        for node in module.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.decorator_list
    )
